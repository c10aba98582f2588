"""Policies: a state goes in, a guess comes out.

`Policy` is the small interface the eval harness, the SFT generator and RL all call.
`EntropySolver` is the expert: greedy maximum entropy over every allowed guess with
ties going to possible answers, optionally a depth-2 lookahead over the top-k
guesses, optionally hard mode. Decisions are memoised by position, so playing all
2,315 answers costs about as much as walking the decision tree once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from solver.entropy import score_guesses
from solver.fileio import atomic_write_json, cache_dir
from solver.lookahead import lookahead_costs
from solver.state import GameState


class Policy(Protocol):
    name: str

    def choose(self, state: GameState) -> str:
        """The next guess for a game that is not over."""


@dataclass(frozen=True)
class SolverSettings:
    hard: bool = False
    lookahead: bool = False
    top_k: int = 12

    @property
    def label(self) -> str:
        parts = ["lookahead" if self.lookahead else "greedy"]
        if self.lookahead:
            parts.append(f"k{self.top_k}")
        if self.hard:
            parts.append("hard")
        return "-".join(parts)


@dataclass(frozen=True)
class Scored:
    """One guess with its entropy (bits) and expected candidates left."""

    word: str
    entropy: float
    expected_left: float
    is_candidate: bool


class EntropySolver:
    def __init__(self, state0: GameState, settings: SolverSettings = SolverSettings()) -> None:
        self.lists = state0.lists
        self.matrix = state0.matrix
        self.secret_kind = state0.secret_kind
        self.settings = settings
        self.name = f"solver-{settings.label}"
        self._memo: dict[bytes, int] = {}
        self._letter_counts = _letter_counts(self.lists.allowed_codes)
        self._candidate_rows = (
            self.lists.answer_rows if self.secret_kind == "answers" else np.arange(len(self.lists.allowed))
        )

    # -- public --------------------------------------------------------------------
    def choose(self, state: GameState) -> str:
        if not state.turns:
            return self.opener()
        return self.lists.allowed[self._choose_row(state)]

    def opener(self) -> str:
        """First guess, computed once per word lists and settings, then read from disk."""
        path = cache_dir() / "openers.json"
        key = f"{self.lists.fingerprint}-{self.secret_kind}-{self.settings.label}"
        known = json.loads(path.read_text()) if path.exists() else {}
        if key not in known:
            known[key] = self.lists.allowed[self._choose_row(self._root())]
            atomic_write_json(path, known)
        return known[key]

    def rank(self, state: GameState, top: int = 5) -> list[Scored]:
        """The best guesses at `state` by entropy, as the solver sees them."""
        rows = self._legal_rows(state)
        entropy, expected = score_guesses(self.matrix, rows, state.candidates)
        is_cand = self._is_candidate_row(state)[rows]
        order = np.lexsort((~is_cand, -entropy))[:top]
        return [
            Scored(self.lists.allowed[rows[i]], float(entropy[i]), float(expected[i]), bool(is_cand[i]))
            for i in order
        ]

    # -- internals -----------------------------------------------------------------
    def _root(self) -> GameState:
        return GameState(self.lists, self.matrix, self.secret_kind)

    def _choose_row(self, state: GameState) -> int:
        candidates = state.candidates
        if len(candidates) <= 2:
            return int(self._candidate_rows[candidates[0]])
        key = candidates.tobytes() + bytes([state.guesses_left])
        if self.settings.hard:
            key += _hard_key(state)
        row = self._memo.get(key)
        if row is None:
            row = self._decide(state)
            self._memo[key] = row
        return row

    def _decide(self, state: GameState) -> int:
        rows = self._legal_rows(state)
        entropy, _ = score_guesses(self.matrix, rows, state.candidates)
        is_cand = self._is_candidate_row(state)[rows]
        ranked = np.lexsort((~is_cand, -entropy))
        if not self.settings.lookahead and state.guesses_left > ENDGAME_TURNS:
            return int(rows[ranked[0]])
        shortlist = rows[ranked[: self.settings.top_k]]
        if state.guesses_left <= ENDGAME_TURNS:
            shortlist = np.unique(np.concatenate([shortlist, rows[is_cand]]))
        pool = np.zeros(0, np.int64) if self.settings.hard else rows[np.argsort(-entropy)[:POOL_SIZE]]
        costs = lookahead_costs(self.matrix, shortlist, state.candidates, pool,
                                self._candidate_rows, state.guesses_left, self.settings.hard)
        return int(shortlist[int(np.argmin(costs))])

    def _is_candidate_row(self, state: GameState) -> np.ndarray:
        mask = np.zeros(len(self.lists.allowed), dtype=bool)
        mask[self._candidate_rows[state.candidates]] = True
        return mask

    def _legal_rows(self, state: GameState) -> np.ndarray:
        """All guesses, or in hard mode those that reuse every revealed hint."""
        if not self.settings.hard or not state.turns:
            return np.arange(len(self.lists.allowed), dtype=np.int64)
        known = state.constraints
        ok = np.ones(len(self.lists.allowed), dtype=bool)
        codes = self.lists.allowed_codes
        for pos, letter in known.greens.items():
            ok &= codes[:, pos] == ord(letter) - ord("a")
        for letter, least in known.min_count.items():
            ok &= self._letter_counts[:, ord(letter) - ord("a")] >= least
        return np.flatnonzero(ok).astype(np.int64)


POOL_SIZE = 400
ENDGAME_TURNS = 3  # from here on even greedy looks ahead, to avoid running out of guesses


def _letter_counts(codes: np.ndarray) -> np.ndarray:
    counts = np.zeros((codes.shape[0], 26), dtype=np.int8)
    for pos in range(codes.shape[1]):
        np.add.at(counts, (np.arange(codes.shape[0]), codes[:, pos]), 1)
    return counts


def _hard_key(state: GameState) -> bytes:
    known = state.constraints
    return repr((sorted(known.greens.items()), sorted(known.min_count.items()))).encode()
