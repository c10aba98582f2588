"""The endgame benchmark: one answer at each of many positions where 1-6 candidates are left.

A whole game says little about why it was lost; the SFT model of ../shared/adapters/
gpu-sft-2400 reaches a one-candidate position in 99 of 128 games and names the secret
there first in 5. So this benchmark asks the model for one answer at hundreds of such
positions and counts what it did: named the secret (closed), repeated an earlier guess,
gave a refused word again, or answered something unplayable, by candidates left.

Positions come from the teacher's games on a split's secrets, their earlier turns
played as SFT data and RL start states are (llm/histories.py), a share of them naming
refused answers as eval's prompts do; or, as an option, from a model's own eval games
(every answer it gave at such a position, with the refusals it had seen). Each position
has a key (secret, turns, refusals): two runs on the same positions pair by key, and the
same split, count and seed give the same positions on every machine. Training secrets
and held-out ones give the same kind of positions, so the two closing rates side by side
tell memory from skill.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from eval.validation import evaluating
from llm.format import ALREADY_GUESSED, Rejection, parse_answer, prompt_tokens
from llm.generation import SamplingSettings, answer_seed, sample
from llm.histories import (DEFAULT_OFF_POLICY, DEFAULT_REJECTED, ENDGAME_CANDIDATES, ENDGAME_TRIES,
                           endgame_history, sample_rejections)
from common.errors import UserError
from common.progress import progress_bar
from solver.feedback import feedback, parse_pattern, pattern_to_string, tiles_matched
from solver.policy import Policy
from solver.setup import Setup
from solver.state import GameState

KIND = "endgame"  # the `kind` of an endgame result, which `eval --compare` pairs by position
DEFAULT_POSITIONS = 400
CHUNK_BATCHES = 4  # generator batches per chunk of positions (answer_positions)
# Per-position outcomes, each a rate over the positions where it applies (refused_again:
# those whose prompt names a refusal; one_candidate_*: those with one candidate left); the
# fit rates (answer_fit) are mean shares over the playable answers.
OUTCOMES = ("closed", "repeat", "repeat_last", "refused_again", "unplayable", "consistent")
ONE_CANDIDATE = ("closed", "repeat", "repeat_last", "unplayable")


@dataclass(frozen=True)
class EndgamePosition:
    secret: str
    state: GameState
    rejected: tuple[Rejection, ...] = ()

    @property
    def key(self) -> str:
        """What pairs the same position across runs: the secret, the turns and the refusals named."""
        turns = ",".join(f"{t.guess}={pattern_to_string(t.pattern)}" for t in self.state.turns)
        refused = ",".join(f"{r.guess}={r.failure}" for r in self.rejected)
        return f"{self.secret}:{turns}" + (f"|{refused}" if refused else "")


def teacher_positions(setup: Setup, teacher: Policy, secrets: list[str], count: int, seed: int,
                      max_candidates: int = ENDGAME_CANDIDATES, off_policy: float = DEFAULT_OFF_POLICY,
                      refused_share: float = DEFAULT_REJECTED) -> list[EndgamePosition]:
    """`count` positions from games against `secrets` (cycled in a seeded order, so every
    secret gives about count/len(secrets)); each game's first position with 1..`max_candidates`
    candidates left. The same position may come up twice (the teacher plays one line); each
    is asked once per occurrence."""
    if not secrets:
        raise UserError("no secrets to draw endgame positions from")
    rng = np.random.default_rng(seed)
    order = [secrets[i] for i in rng.permutation(len(secrets))]
    columns = {w: i for i, w in enumerate(setup.lists.secrets(setup.secret_kind))}
    positions: list[EndgamePosition] = []
    for attempt in range(ENDGAME_TRIES * count):
        if len(positions) == count:
            break
        secret = order[attempt % len(order)]
        found = endgame_history(setup, teacher, secret, columns[secret], rng, max_candidates, off_policy)
        if found is not None:
            state = found[0]
            positions.append(EndgamePosition(secret, state, sample_rejections(state, rng, refused_share)))
    if len(positions) < count:
        raise UserError(f"only {len(positions)} of {count} endgame positions were found; use fewer --positions")
    return positions


def model_positions(setup: Setup, result: dict, max_candidates: int = ENDGAME_CANDIDATES) -> list[EndgamePosition]:
    """Every answer a model gave, in an eval result's per-game records, at a position with
    1..`max_candidates` candidates left, with the refusals it had been shown there."""
    return [position for position, _ in model_answers(setup, result, max_candidates)]


def model_answers(setup: Setup, result: dict,
                  max_candidates: int = ENDGAME_CANDIDATES) -> list[tuple[EndgamePosition, dict]]:
    """`model_positions`, each with the move record the model answered there."""
    return [(position, move) for position, move in answered_positions(setup, result)
            if position.state.turns and len(position.state.candidates) <= max_candidates]


def answered_positions(setup: Setup, result: dict) -> list[tuple[EndgamePosition, dict]]:
    """Every move record in an eval result's per-game records, opening included, with the position
    it answered and the refusals shown there."""
    columns = {w: i for i, w in enumerate(setup.lists.secrets(setup.secret_kind))}
    positions = []
    for game in result.get("per_game", []):
        secret = game.get("secret")
        if secret not in columns or not isinstance(game.get("moves"), list):
            raise UserError("the games file has no per-game moves of this word list's secrets")
        state, rejected = setup.start, ()
        for move in game["moves"]:
            if state.over:
                break
            positions.append((EndgamePosition(secret, state, rejected), move))
            if move.get("failure") is not None:
                rejected += (Rejection(move.get("guess"), move["failure"]),)
                continue
            guess = move["guess"]
            state, rejected = state.play(guess, int(setup.matrix[setup.lists.index(guess), columns[secret]])), ()
    return positions


def answer_positions(model, tokenizer, positions: list[EndgamePosition], sampling: SamplingSettings, seed: int,
                     batch_size: int = 32, show_progress: bool = False,
                     steer: Callable[[EndgamePosition], Callable] | None = None) -> list[dict]:
    """One sampled answer at each position, as per-position records; `steer` gives each
    position's answer a logits processor. Position i's answer draws from `answer_seed(seed, i)`:
    the same answers at any batch size.

    Positions go to the generator `CHUNK_BATCHES` batches at a time, so progress shows
    while the answers are written.
    """
    records: list[dict] = []
    step = CHUNK_BATCHES * batch_size
    with progress_bar("positions", disable=not show_progress) as progress:
        task = progress.add_task("endgame", total=len(positions))
        for start in range(0, len(positions), step):
            chunk = positions[start:start + step]
            prompts = [prompt_tokens(tokenizer, p.state, p.rejected) for p in chunk]
            processors = [steer(p) for p in chunk] if steer else None
            seeds = [answer_seed(seed, start + i) for i in range(len(chunk))]
            completions = sample(model, tokenizer, prompts, 1, sampling, batch_size, processors, seeds=seeds)
            records.extend(position_record(p, c.text) for p, (c,) in zip(chunk, completions))
            progress.advance(task, len(chunk))
    return records


def position_record(position: EndgamePosition, text: str) -> dict:
    """What the answer `text` did at `position`: the figures OUTCOMES names, and the answer."""
    state = position.state
    parsed = parse_answer(text, state.lists, state.guesses)
    refused = [r.guess for r in position.rejected]
    return {
        "key": position.key, "secret": position.secret, "candidates": int(len(state.candidates)),
        "turn": len(state.turns) + 1, "refused": refused, "text": text, "guess": parsed.guess,
        "failure": parsed.failure,
        "closed": parsed.failure is None and parsed.guess == position.secret,
        "repeat": parsed.failure == ALREADY_GUESSED,
        "repeat_last": parsed.failure == ALREADY_GUESSED and parsed.guess == state.guesses[-1],
        "refused_again": (parsed.guess is not None and parsed.guess in refused) if refused else None,
        "unplayable": parsed.failure is not None,
        "consistent": parsed.failure is None and state.constraints.allows(parsed.guess),
    }


def outcome_counts(record: dict) -> dict[str, tuple[int, int]]:
    """(count, total) of each rate in one position's record, so that a paired comparison can
    resample positions and recompute every rate (eval/paired.py)."""
    one = record["candidates"] == 1
    counts = {name: (int(bool(record[name])), 1) for name in OUTCOMES if name != "refused_again"}
    counts["refused_again"] = (int(bool(record["refused_again"])), int(record["refused_again"] is not None))
    counts.update({f"one_candidate_{name}": (int(one and bool(record[name])), int(one)) for name in ONE_CANDIDATE})
    fit = answer_fit(record)
    counts["fit"] = (fit, 1) if fit is not None else (0.0, 0)
    counts["one_candidate_fit"] = counts["fit"] if one else (0.0, 0)
    return counts


def answer_fit(record: dict) -> float | None:
    """The share of the position's feedback tiles that a playable answer would have given had
    it been the secret (1 exactly when it fits every clue; rl/reward.py's `fit`), None for an
    unplayable one. A graded `consistent`: it moves before the closing rate does.

    Read from the record's key and guess, so results written before this figure get it too.
    Raises ValueError on a key that does not hold turns as `guess=tiles`."""
    if record["unplayable"]:
        return None
    turns = [turn.split("=") for turn in record["key"].split("|")[0].split(":", 1)[1].split(",")]
    shared = sum(tiles_matched(feedback(guess, record["guess"]), parse_pattern(tiles)) for guess, tiles in turns)
    return shared / (5 * len(turns))


RATES = (*(f"{name}_rate" for name in OUTCOMES), "fit_rate",
         *(f"one_candidate_{name}_rate" for name in ONE_CANDIDATE), "one_candidate_fit_rate")


def summarise_endgame(records: list[dict]) -> dict:
    """Every rate over all positions, and the closing rate by candidates left."""
    def rate(count: int, total: int) -> float | None:
        return round(count / total, 4) if total else None

    counts = [outcome_counts(r) for r in records]
    totals = {name: (sum(c[name][0] for c in counts), sum(c[name][1] for c in counts)) for name in counts[0]} \
        if counts else {}
    by_candidates = {}
    for n in sorted({r["candidates"] for r in records}):
        at = [r for r in records if r["candidates"] == n]
        by_candidates[str(n)] = {"positions": len(at), "closing_rate": rate(sum(r["closed"] for r in at), len(at))}
    return {"positions": len(records),
            "one_candidate_positions": sum(r["candidates"] == 1 for r in records),
            **{f"{name}_rate": rate(*totals[name]) if totals else None for name in totals},
            "by_candidates": by_candidates}


class EndgameEval:
    """The benchmark on a fixed set of validation positions, played inside training runs.

    Like eval/validation.py's HeldOutEval: the same positions and seed every time, mlx's
    key and the model's train/eval mode put back afterwards, so a run with these evals
    trains exactly as one without them would.
    """

    def __init__(self, setup: Setup, teacher: Policy, secrets: list[str], count: int, seed: int,
                 sampling: SamplingSettings = SamplingSettings(), batch_size: int = 32,
                 max_candidates: int = ENDGAME_CANDIDATES) -> None:
        self.positions = teacher_positions(setup, teacher, secrets, count, seed, max_candidates)
        self.seed, self.sampling, self.batch_size = seed, sampling, batch_size

    def __call__(self, model, tokenizer) -> dict:
        began = time.perf_counter()
        with evaluating(model):
            records = answer_positions(model, tokenizer, self.positions, self.sampling, self.seed, self.batch_size)
        summary = summarise_endgame(records)
        return {**{k: v for k, v in summary.items() if k != "by_candidates"},
                "temperature": self.sampling.temperature, "seconds": round(time.perf_counter() - began, 3)}


def keyed_records(result: dict) -> dict[str, dict]:
    """An endgame result's records by key; a key seen twice gets `#2`, `#3`... in order."""
    seen: dict[str, int] = {}
    keyed = {}
    for record in result.get("per_position", []):
        seen[record["key"]] = seen.get(record["key"], 0) + 1
        keyed[record["key"] + (f"#{seen[record['key']]}" if seen[record["key"]] > 1 else "")] = record
    return keyed

