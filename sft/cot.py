"""The solver's move with a short chain of thought that is true and checkable.

A thought has three parts, each read off the game state or the solver's scores,
never re-derived: what the feedback says (a compact form of `Constraints`), how many
secrets still fit (listed when there are few), and why the guess (the information it
gains in bits, the candidates expected to be left, whether it can be the answer; or
"Only X remains."). Every token costs training time, so the text is terse. SFT data
and RL's expert iteration both build targets with `expert_answer`.
"""

from __future__ import annotations

from llm.format import format_answer
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


def thought(state: GameState, choice: Scored) -> str:
    """The reasoning text for playing `choice` at `state` (without the tags)."""
    parts = knowledge(state.constraints) if state.turns else ["No feedback yet."]
    count = len(state.candidates)
    if count == 1:
        parts.append(f"Only {choice.word} remains.")
        return " ".join(parts)
    if count <= LIST_AT_MOST:
        parts.append(f"{count} possible words: {', '.join(state.candidate_words())}.")
    else:
        parts.append(f"{count} possible words.")
    verdict = "could be the answer" if choice.is_candidate else "not a possible answer"
    parts.append(f"{choice.word}: {choice.entropy:.1f} bits, ~{choice.expected_left:.1f} words left; "
                 f"{verdict}.")
    return " ".join(parts)


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
