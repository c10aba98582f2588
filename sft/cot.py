"""The solver's move with a short chain of thought that is true and checkable.

A thought has three parts, each read off the game state or the solver's scores,
never re-derived: what the feedback says (a compact form of `Constraints`), how many
secrets still fit (listed when there are few), and why the guess (the information it
gains in bits, the candidates expected to be left, whether it can be the answer; or
"Only X remains."). Every token costs training time, so the text is terse. SFT data
and RL's expert iteration both build targets with `expert_answer`.

Because every sentence is read off the state, the same code also checks a thought a
model wrote (`check_thought`): the true sentences for the model's own guess are
known, so each sentence the model wrote is either one of them or a false claim (a
wrong pattern, a letter called absent that is not, a wrong count, "Only X remains"
when X does not fit, wrong bits). RL's reward credits true thoughts and expert
iteration never trains on a false one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llm.format import format_answer, one_left
from solver.entropy import guess_score
from solver.feedback import WIN
from solver.policy import Policy, Scored
from solver.state import Constraints, GameState, _join, _times

LIST_AT_MOST = 6  # candidates are named when this few remain


def score_choice(state: GameState, guess: str) -> Scored:
    """The solver's figures for `guess` at `state`: bits, expected candidates left, answer or not."""
    row = state.lists.index(guess)
    bits, expected = guess_score(state.matrix, row, state.candidates)
    could_win = bool((state.matrix[row, state.candidates] == WIN).any())
    return Scored(guess, bits, expected, could_win)


# The sentence that names the guess where more than one candidate is left ("crane: 5.8 bits, ..."):
# where a model writes it, it chooses its word (rl/naming_head.py `said_context`).
GUESS_SENTENCE = re.compile(r" [A-Za-z]+: [0-9.]+ bits")


def thought(state: GameState, choice: Scored) -> str:
    """The reasoning text for playing `choice` at `state` (without the tags)."""
    parts = knowledge(state.constraints) if state.turns else ["No feedback yet."]
    count = len(state.candidates)
    if count == 1:
        parts.append(one_left(choice.word))
        return " ".join(parts)
    if count <= LIST_AT_MOST:
        parts.append(f"{count} possible words: {', '.join(state.candidate_words())}.")
    else:
        parts.append(f"{count} possible words.")
    verdict = "could be the answer" if choice.is_candidate else "not a possible answer"
    parts.append(f"{choice.word}: {choice.entropy:.1f} bits, ~{choice.expected_left:.1f} words left; "
                 f"{verdict}.")
    return " ".join(parts)


_SENTENCE_END = re.compile(r"(?<=\.)\s+")


def sentences(text: str) -> list[str]:
    """A thought cut into its sentences (each ends with a full stop; "4.7 bits" has no space after it)."""
    return [part for part in _SENTENCE_END.split(" ".join(text.split())) if part]


def true_sentences(state: GameState, guess: str) -> list[str]:
    """What a truthful thought for playing `guess` at `state` says, in the solver's own words.

    As `thought`, except that with one candidate left the true sentence names that
    candidate, whatever the guess.
    """
    if len(state.candidates) == 1:
        facts = knowledge(state.constraints) if state.turns else ["No feedback yet."]
        return facts + [one_left(state.candidate_words()[0])]
    return sentences(thought(state, score_choice(state, guess)))


@dataclass(frozen=True)
class ThoughtCheck:
    """How true a written thought is: `score` = true sentences / max(written, expected)."""

    score: float
    false_claims: tuple[str, ...]  # written sentences that are not true at the state
    missing: tuple[str, ...]  # true sentences the thought left out

    @property
    def accepted(self) -> bool:
        """Every sentence true and none left out: a thought fit to train on."""
        return not self.false_claims and not self.missing


def check_thought(state: GameState, written: str, guess: str) -> ThoughtCheck:
    """Check each sentence of `written` (a model's thought for playing `guess`) against the state.

    Sentences are compared whole: the feedback facts, the count or list of candidates
    and the guess's bits and expected candidates are exact figures, so a sentence is
    either the true one or a claim the solver can refute.
    """
    expected = true_sentences(state, guess)
    truth = set(expected)
    said = sentences(written)
    true_said = [s for s in dict.fromkeys(said) if s in truth]
    false_claims = tuple(s for s in said if s not in truth)
    missing = tuple(s for s in expected if s not in said)
    score = len(true_said) / max(len(said), len(expected), 1)
    return ThoughtCheck(score, false_claims, missing)


def truthful_answer(state: GameState, guess: str) -> str:
    """The training target for playing `guess` at `state`: the guess with a true thought."""
    return format_answer(" ".join(true_sentences(state, guess)), guess)


def knowledge(known: Constraints) -> list[str]:
    """One short sentence per fact: the pattern of greens, each letter's count and banned spots, absentees."""
    facts = []
    if known.greens:
        facts.append("Pattern: " + "".join(known.greens.get(i, "_").upper() for i in range(5)) + ".")
    for letter in known.present:
        least, most = known.min_count[letter], known.max_count.get(letter)
        not_at = sorted(p + 1 for p in known.banned.get(letter, ()))
        greens = sum(1 for placed in known.greens.values() if placed == letter)
        details = []
        if most == least:
            details.append(f"exactly {_times(least)}")
        elif least > greens:
            details.append("in the word" if least == 1 else f"at least {_times(least)}")
        if not_at:
            details.append(f"not at {_join(not_at)}")
        if details:
            facts.append(f"{letter.upper()}: {', '.join(details)}.")
    if known.absent:
        facts.append(f"Absent: {', '.join(letter.upper() for letter in known.absent)}.")
    return facts


def expert_move(solver: Policy, state: GameState) -> tuple[str, str]:
    """The solver's guess at `state` and the full training target for it."""
    guess = solver.choose(state)
    return guess, format_answer(thought(state, score_choice(state, guess)), guess)


def expert_answer(solver: Policy, state: GameState) -> str:
    """The training target for `state`: the solver's guess with its chain of thought."""
    return expert_move(solver, state)[1]
