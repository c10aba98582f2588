"""Solver games -> chain-of-thought SFT examples, split by secret, written for `datasets` and mlx-lm.

Each game draws a start state (0..max_history earlier turns, some not the solver's),
then the solver plays on; every solver turn is one example whose prompt is exactly
what eval and RL show a model (`llm.format.messages`) and whose target is the
solver's guess with its thought (`sft.cot`). A secret belongs to one split only, by a
hash of the word (so the splits stay put across seeds), and eval's held-out secrets
are in none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from common.errors import UserError
from common.knobs import knob, knob_like
from common.options import SEED
from eval.splits import SFT_SHARES_PER_MILLE, SFT_SPLITS, sft_split_of, trainable
from llm.format import Rejection, messages
from llm.histories import DEFAULT_REJECTED, SOLVER, sample_rejections
from sft.cot import expert_move
from sft.states import sample_start_state, secret_columns
from solver.policy import EXPERTS, Policy
from solver.setup import Setup
from solver.state import GameState

# Used when no tokenizer is at hand: SmolLM2's tokenizer on this format (chat template included).
CHARS_PER_TOKEN = {"prompt": 3.2, "answer": 2.3}
# The examples of every game are held in memory until the dataset is written: about 15 kB a game
# (measured: 2,000 games took 26 MB more than 200), so this bound keeps a run near 1.5 GB.
MAX_GAMES = 100_000


@dataclass(frozen=True)
class GenSettings:
    """What gen-sft plays and how its prompts vary: each knob declared once, for gen-sft's flags,
    its manifest and the pipeline's first stage."""

    games: int = knob(2000, f"Solver games to play; every solver turn is one example (at most {MAX_GAMES:,}: "
                            "the examples stay in memory until the dataset is written).", range=(1, MAX_GAMES),
                      flag="--games")
    expert: str = knob("solver", "The teacher: the solver's own moves, or its best word among those that can still "
                                 "be the secret (every target fits the clues, as a small model can learn to play).",
                       choices=EXPERTS, flag="--expert")
    max_history: int = knob(5, "Most earlier turns a prompt shows; start states get 0..N of them.", range=(0, 5),
                            flag="--max-history")
    off_policy: float = knob(0.5, "Chance that an earlier turn is not the solver's (a fitting or a random word).",
                             range=(0.0, 1.0), flag="--off-policy")
    rejected: float = knob(DEFAULT_REJECTED, "Share of prompts that also name one or two answers refused at that "
                                             "turn, as eval and RL show them after a bad answer.", range=(0.0, 1.0),
                           flag="--rejected")
    seed: int = knob_like(SEED)


@dataclass(frozen=True)
class Example:
    split: str
    secret: str
    game: int
    turns: int  # earlier turns shown in the prompt
    off_policy_turns: int  # of those, the ones the solver did not play
    candidates: int
    guess: str
    prompt: list[dict[str, str]]  # system + user
    answer: str
    rejected: tuple[Rejection, ...] = ()  # answers the prompt names as refused at this turn

    @property
    def messages(self) -> list[dict[str, str]]:
        return self.prompt + [{"role": "assistant", "content": self.answer}]


def secrets_by_split(words: tuple[str, ...] | list[str]) -> dict[str, list[str]]:
    """The trainable secrets (eval's held-out ones removed), grouped by split."""
    grouped: dict[str, list[str]] = {split: [] for split in SFT_SPLITS}
    for word in trainable(words):
        grouped[sft_split_of(word)].append(word)
    return grouped


def deal_games(pools: dict[str, list[str]], games: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    """(split, secret) for each game: valid and test get their share (at least one game each
    from 3 games on), train the rest; within a split the secrets are shuffled and dealt
    round-robin, so no secret plays twice before all have played once."""
    counts = {split: 0 for split in SFT_SPLITS}
    for split, share in SFT_SHARES_PER_MILLE.items():
        if pools[split] and games >= len(SFT_SPLITS):
            counts[split] = max(round(games * share / 1000), 1)
    counts["train"] = games - sum(counts.values())
    dealt = []
    for split in SFT_SPLITS:
        if counts[split] and not pools[split]:
            raise UserError(f"the word list has no {split} secrets to deal {counts[split]} games to")
        order = rng.permutation(len(pools[split])) if pools[split] else []
        dealt += [(split, pools[split][order[i % len(order)]]) for i in range(counts[split])]
    return dealt


def play_examples(setup: Setup, solver: Policy, dealt: list[tuple[str, str]], rng: np.random.Generator,
                  max_history: int, off_policy: float, rejected: float = 0.0,
                  on_game: Callable[[], None] = lambda: None) -> list[Example]:
    """Play every dealt game from a sampled start state. Every solver move is one example
    (if its prompt shows at most `max_history` turns), except the moves of a history that
    is all solver so far: those positions are the solver's own path, which the games
    starting there cover already. A `rejected` share of the prompts also name one or two
    answers refused at that turn (`llm.histories.sample_rejections`); the target stays the
    solver's move."""
    columns = secret_columns(setup)
    examples = []
    for game, (split, secret) in enumerate(dealt):
        column = columns[secret]
        start = sample_start_state(setup, solver, secret, column, rng, max_history, off_policy)
        state, off = setup.start, 0
        for turn, player in zip(start.state.turns, start.players):
            if player == SOLVER and off:  # a solver move off its own path: already computed, keep it
                refused = sample_rejections(state, rng, rejected)
                examples.append(_example(split, secret, game, state, off, refused, *expert_move(solver, state)))
            state, off = state.play(turn.guess, turn.pattern), off + (player != SOLVER)
        while not state.over and len(state.turns) <= max_history:
            refused = sample_rejections(state, rng, rejected)
            example = _example(split, secret, game, state, off, refused, *expert_move(solver, state))
            examples.append(example)
            state = state.play(example.guess, int(setup.matrix[setup.lists.index(example.guess), column]))
        on_game()
    return examples


def _example(split: str, secret: str, game: int, state: GameState, off: int, refused: tuple[Rejection, ...],
             guess: str, answer: str) -> Example:
    return Example(split, secret, game, len(state.turns), off, len(state.candidates), guess,
                   messages(state, refused), answer, refused)


# -- token counts ---------------------------------------------------------------------

def token_lengths(examples: list[Example], tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and answer lengths in tokens, as mlx-lm's ChatDataset with mask_prompt counts them:
    the prompt is the chat-templated system+user turn with the generation prompt, the answer
    everything after it. Without a tokenizer: characters / CHARS_PER_TOKEN."""
    if tokenizer is None:
        prompt = [sum(len(m["content"]) for m in e.prompt) / CHARS_PER_TOKEN["prompt"] for e in examples]
        answer = [len(e.answer) / CHARS_PER_TOKEN["answer"] for e in examples]
        return np.ceil(prompt).astype(np.int64), np.ceil(answer).astype(np.int64)
    if not examples:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    fast = _piecewise_lengths(examples, tokenizer)
    sample = sorted({round(i * (len(examples) - 1) / (VERIFY_SAMPLE - 1)) for i in range(VERIFY_SAMPLE)})
    exact = _exact_lengths([examples[i] for i in sample], tokenizer)
    if fast is not None and all((fast[0][i], fast[1][i]) == pair for i, pair in zip(sample, zip(*exact))):
        return fast
    return _exact_lengths(examples, tokenizer)


VERIFY_SAMPLE = 64  # examples whose fast token counts are checked against the full chat template
_MARK_USER, _MARK_ANSWER = "\ue000", "\ue001"
_PIECE = re.compile(r"\n| ?[^ \n]+| ")  # a line break, or a word with the space before it


def _exact_lengths(examples: list[Example], tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """What ChatDataset computes: template the prompt (with generation prompt) and the whole chat."""
    prompt = np.array([len(tokenizer.apply_chat_template(e.prompt, add_generation_prompt=True)) for e in examples])
    full = np.array([len(tokenizer.apply_chat_template(e.messages)) for e in examples])
    return prompt.astype(np.int64), (full - prompt).astype(np.int64)


def _piecewise_lengths(examples: list[Example], tokenizer) -> tuple[np.ndarray, np.ndarray] | None:
    """The same counts, summed over pieces that repeat across examples: the template's fixed
    parts, and the words of each prompt and answer, each distinct piece tokenized once.
    Exact when the template is `head + user + middle + answer + tail` and the tokenizer
    never merges across a line break or into the space before a word (true of byte-level
    BPE, which pre-splits there; the caller checks a sample against `_exact_lengths`).
    None when the template is not of that shape."""
    system = examples[0].prompt[0]
    backend = getattr(tokenizer, "backend_tokenizer", None)  # a fast (Rust) tokenizer batches well
    if backend is None or any(e.prompt[0] != system for e in examples):
        return None
    marked = [system, {"role": "user", "content": _MARK_USER}]
    prompt_text = tokenizer.apply_chat_template(marked, add_generation_prompt=True, tokenize=False)
    full_text = tokenizer.apply_chat_template(marked + [{"role": "assistant", "content": _MARK_ANSWER}],
                                              tokenize=False)
    if prompt_text.count(_MARK_USER) != 1 or not full_text.startswith(prompt_text + _MARK_ANSWER):
        return None
    head, middle = prompt_text.split(_MARK_USER)
    tail = full_text[len(prompt_text + _MARK_ANSWER):]
    split = {text: _pieces(text) for e in examples for text in (e.prompt[1]["content"], e.answer)}
    distinct = sorted({piece for pieces in split.values() for piece in pieces} | {head, middle, tail})
    encodings = backend.encode_batch(distinct, add_special_tokens=False)
    size = {piece: len(encoding.ids) for piece, encoding in zip(distinct, encodings)}
    length = {text: sum(size[piece] for piece in pieces) for text, pieces in split.items()}
    prompt = [size[head] + length[e.prompt[1]["content"]] + size[middle] for e in examples]
    answer = [length[e.answer] + size[tail] for e in examples]
    return np.array(prompt, dtype=np.int64), np.array(answer, dtype=np.int64)


def _pieces(text: str) -> list[str]:
    """`text` cut before every space and around line breaks: the pieces byte-level BPE
    pre-splits at, so that words, numbers and template parts repeat across examples."""
    return _PIECE.findall(text)


def length_stats(lengths: np.ndarray) -> dict:
    if len(lengths) == 0:
        return {"mean": 0.0, "median": 0.0, "p95": 0.0, "max": 0, "total": 0}
    return {"mean": round(float(lengths.mean()), 1), "median": round(float(np.median(lengths)), 1),
            "p95": round(float(np.percentile(lengths, 95)), 1), "max": int(lengths.max()),
            "total": int(lengths.sum())}


# -- writing ----------------------------------------------------------------------------

def jsonl(examples: list[Example]) -> str:
    """mlx-lm's chat format: one {"messages": [system, user, assistant]} object a line."""
    return "".join(json.dumps({"messages": e.messages}) + "\n" for e in examples)


def write_dataset(folder: Path, examples: list[Example], manifest: dict) -> None:
    """train/valid/test.jsonl for mlx-lm, hf/ (a datasets DatasetDict) and manifest.json."""
    from datasets import Dataset, DatasetDict, Features, List, Value, disable_progress_bars, enable_progress_bars

    features = Features({
        "messages": List({"role": Value("string"), "content": Value("string")}),
        "secret": Value("string"), "game": Value("int32"), "turns": Value("int32"),
        "off_policy_turns": Value("int32"), "candidates": Value("int32"), "guess": Value("string"),
        "rejected": List(Value("string")),
    })
    splits = {}
    for split in SFT_SPLITS:
        chosen = [e for e in examples if e.split == split]
        (folder / f"{split}.jsonl").write_text(jsonl(chosen), encoding="utf-8")
        columns = {name: [getattr(e, name) for e in chosen] for name in features
                   if name not in ("messages", "rejected")}
        columns["rejected"] = [[r.guess for r in e.rejected] for e in chosen]
        splits[split] = Dataset.from_dict({"messages": [e.messages for e in chosen], **columns}, features=features)
    disable_progress_bars()  # the command shows its own progress and summary
    try:
        DatasetDict(splits).save_to_disk(str(folder / "hf"))
    finally:
        enable_progress_bars()
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def split_summary(examples: list[Example], prompt_tokens: np.ndarray, answer_tokens: np.ndarray) -> dict:
    """Per split: games, secrets, examples and token statistics (plus the same over all)."""
    names = np.array([e.split for e in examples])
    summary = {}
    for split in (*SFT_SPLITS, "all"):
        mask = np.ones(len(examples), bool) if split == "all" else names == split
        chosen = [e for e, keep in zip(examples, mask) if keep]
        summary[split] = {
            "games": len({e.game for e in chosen}),
            "secrets": len({e.secret for e in chosen}),
            "examples": len(chosen),
            "off_policy_examples": sum(e.off_policy_turns > 0 for e in chosen),
            "rejected_examples": sum(bool(e.rejected) for e in chosen),
            "prompt_tokens": length_stats(prompt_tokens[mask]),
            "answer_tokens": length_stats(answer_tokens[mask]),
        }
    return summary


def secrets_used(examples: list[Example]) -> dict[str, list[str]]:
    return {split: sorted({e.secret for e in examples if e.split == split}) for split in SFT_SPLITS}
