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
from solver.feedback import WIN
from solver.lookahead import FAIL_PENALTY, LOSS_LINE, distinct_splits, lookahead_costs
from solver.opener import OPENER_VERSION, best_opener, opener_shortlist_size
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


@dataclass(frozen=True)
class Decision:
    """A guess row and the expected guesses to finish after choosing it (nan if unscored)."""

    row: int
    cost: float


NO_DECISION = Decision(-1, np.inf)


class EntropySolver:
    """Greedy entropy or lookahead, memoised by position.

    The memo key is the candidate set, the guesses left (the lookahead's verdict
    depends on them) and, in hard mode, the hints that limit which guesses are legal.
    """

    def __init__(self, state0: GameState, settings: SolverSettings = SolverSettings()) -> None:
        self.lists = state0.lists
        self.matrix = state0.matrix
        self.secret_kind = state0.secret_kind
        self.settings = settings
        self.name = f"solver-{settings.label}"
        self._memo: dict[bytes, Decision] = {}
        self._quick: dict[bytes, Decision] = {}
        self._letter_counts = _letter_counts(self.lists.allowed_codes)
        self._candidate_rows = (
            self.lists.answer_rows if self.secret_kind == "answers" else np.arange(len(self.lists.allowed))
        )

    # -- public --------------------------------------------------------------------
    def choose(self, state: GameState) -> str:
        if not state.turns:
            return self.opener()
        return self.lists.allowed[self._solve(state).row]

    def opener(self) -> str:
        """First guess, computed once per word lists, secret list and settings, then read from disk."""
        path = cache_dir() / "openers.json"
        key = f"{self.lists.fingerprint}-{self.secret_kind}-{self.settings.label}-v{OPENER_VERSION}"
        known = json.loads(path.read_text()) if path.exists() else {}
        if key not in known:
            root = self._root()
            shortlist = [s.word for s in self.rank(root, opener_shortlist_size(len(root.candidates)))]
            known[key] = best_opener(self.choose, root, shortlist)
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

    def _solve(self, state: GameState, widen: bool = True) -> Decision:
        """The decision at `state`, memoised.

        When every shortlisted guess expects a loss, the whole pool is searched for one
        that does not (`widen`). That search is slow and usually fruitless in positions
        that are only being estimated, so `_cost_after` skips it; the positions that
        are actually played get it.
        """
        candidates = state.candidates
        if len(candidates) <= 2:
            miss = 0.5 if state.guesses_left >= 2 else 0.5 * FAIL_PENALTY
            return Decision(int(self._candidate_rows[candidates[0]]), 1.0 + (len(candidates) - 1) * miss)
        key = candidates.tobytes() + bytes([state.guesses_left])
        if self.settings.hard:
            key += _hard_key(state)
        if key in self._memo:
            return self._memo[key]
        quick = self._quick.get(key)
        if quick is None:
            quick = self._quick[key] = self._decide(state)
        if not widen:
            return quick
        decision = quick
        if quick.cost > LOSS_LINE and state.guesses_left >= 2:
            rival = self._safe_rival(state, quick)
            decision = rival if rival.cost < quick.cost else quick
        self._memo[key] = decision
        return decision

    def _decide(self, state: GameState) -> Decision:
        if not self.settings.lookahead and state.guesses_left > ENDGAME_TURNS:
            return Decision(self._most_informative(state), np.nan)
        shortlist, pool = self._shortlist_and_pool(state)
        return self._best_of(state, shortlist, pool, VERIFY_MAX)

    def _most_informative(self, state: GameState) -> int:
        """Greedy's guess: the most entropy, ties to candidates, then to the list order."""
        rows = self._legal_rows(state)
        entropy, _ = score_guesses(self.matrix, rows, state.candidates)
        is_cand = self._is_candidate_row(state)[rows]
        return int(rows[np.lexsort((~is_cand, -entropy))[0]])

    def _shortlist_and_pool(self, state: GameState) -> tuple[np.ndarray, np.ndarray]:
        """Guesses to score (best by entropy, ties to candidates; all candidates near the
        end) and the pool of follow-ups the lookahead tries.

        Outside hard mode, guesses that split the candidates the same way are the same
        move here, so only the best-ranked of each kind is kept: in small positions that
        lets the pool hold every distinct split, not a few hundred copies of a few.
        """
        rows = self._legal_rows(state)
        entropy, _ = score_guesses(self.matrix, rows, state.candidates)
        is_cand = self._is_candidate_row(state)[rows]
        order = np.lexsort((~is_cand, -entropy))
        ranked = rows[order[: np.count_nonzero(entropy > 0) or 1]]  # the rest tell nothing
        if not self.settings.hard:
            ranked = ranked[distinct_splits(self.matrix, ranked, state.candidates, POOL_SIZE)]
        shortlist = ranked[: self.settings.top_k]
        if state.guesses_left <= ENDGAME_TURNS:
            shortlist = np.concatenate([shortlist, np.setdiff1d(rows[is_cand], shortlist)])
        return shortlist, ranked[:POOL_SIZE]

    def _best_of(self, state: GameState, shortlist: np.ndarray, pool: np.ndarray, verify_max: int,
                 widen: bool = False) -> Decision:
        """The shortlisted guess with the lowest lookahead cost (verified far from the end).

        The first guess is scored alone so that its cost can cut the others short.
        """
        first = self._costs(state, shortlist[:1], pool, np.inf)
        costs = np.concatenate([first, self._costs(state, shortlist[1:], pool, first[0])])
        if state.guesses_left >= VERIFY_FROM:
            return self._verified(state, shortlist, costs, verify_max, widen)
        best = int(np.argmin(costs))
        return Decision(int(shortlist[best]), float(costs[best]))

    def _safe_rival(self, state: GameState, risky: Decision) -> Decision:
        """Every shortlisted guess expects a loss: the best of the guesses that best split
        the secrets `risky.row` would leave in losing positions, or NO_DECISION."""
        rivals = self._splitters_of_risk(state, risky.row)
        if not len(rivals):
            return NO_DECISION
        _, pool = self._shortlist_and_pool(state)
        return self._best_of(state, rivals, pool, WIDE_VERIFY_MAX, widen=True)

    def _splitters_of_risk(self, state: GameState, row: int) -> np.ndarray:
        """Legal guesses that best split the candidates `row` would leave in positions
        expecting a loss (ties by entropy over all candidates)."""
        word = self.lists.allowed[row]
        patterns = np.unique(self.matrix[row][state.candidates])
        children = [state.play(word, int(p)) for p in patterns if p != WIN]
        at_risk = [c.candidates for c in children if self._solve(c, widen=False).cost > LOSS_LINE]
        if not at_risk:
            return np.zeros(0, dtype=np.int64)
        rows = self._legal_rows(state)
        entropy, _ = score_guesses(self.matrix, rows, state.candidates)
        risk_entropy, _ = score_guesses(self.matrix, rows, np.concatenate(at_risk))
        return rows[np.lexsort((-entropy, -risk_entropy))[:RISK_SPLITTERS]]

    def _costs(self, state: GameState, shortlist: np.ndarray, pool: np.ndarray, cutoff: float,
               satisfice: bool = False) -> np.ndarray:
        greens, mins = _hard_arrays(state)
        game = (self.matrix, self.lists.allowed_codes, self._letter_counts, self._candidate_rows, pool)
        return lookahead_costs(game, shortlist, state.candidates, state.guesses_left, DEPTH, self.settings.hard,
                               greens, mins, cutoff, satisfice)

    def _verified(self, state: GameState, shortlist: np.ndarray, costs: np.ndarray, verify_max: int,
                  widen: bool) -> Decision:
        """Re-score the most promising guesses by what the policy itself does next.

        Far from the end the lookahead's leaves are estimates, blind to families like
        _ESTS that need more guesses than are left; the policy's own decisions one
        move later are exact about that. The best guess's follow-ups are needed for
        play anyway (and memoised), so checking it is free; rivals are checked only
        while their estimate still beats the best checked cost.
        """
        best = NO_DECISION
        for i in np.argsort(costs, kind="stable")[:verify_max]:
            if costs[i] >= best.cost:
                break
            cost = self._cost_after(state, int(shortlist[i]), widen)
            if cost < best.cost:
                best = Decision(int(shortlist[i]), cost)
        return best

    def _cost_after(self, state: GameState, row: int, widen: bool) -> float:
        """Expected guesses to finish when `row` is played now and the policy plays on."""
        word = self.lists.allowed[row]
        patterns, counts = np.unique(self.matrix[row][state.candidates], return_counts=True)
        total = 1.0
        for pattern, count in zip(patterns, counts):
            if pattern != WIN:
                child = state.play(word, int(pattern))
                total += count / len(state.candidates) * self._solve(child, widen).cost
        return total

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


POOL_SIZE = 400  # follow-up guesses the lookahead tries: the best splitters of the position
DEPTH = 2  # guesses searched before the estimate (exact anyway once two guesses are left)
ENDGAME_TURNS = 3  # from here on even greedy looks ahead, to avoid running out of guesses
VERIFY_FROM = 5  # with this many guesses left the lookahead's leaves are estimates: verify
VERIFY_MAX = 3  # rival guesses re-scored by playing on
WIDE_VERIFY_MAX = 30  # the same, when every shortlisted guess risks a loss
RISK_SPLITTERS = 30  # rivals tried far from the end when every checked guess risks a loss


def _letter_counts(codes: np.ndarray) -> np.ndarray:
    counts = np.zeros((codes.shape[0], 26), dtype=np.int8)
    for pos in range(codes.shape[1]):
        np.add.at(counts, (np.arange(codes.shape[0]), codes[:, pos]), 1)
    return counts


def _hard_key(state: GameState) -> bytes:
    known = state.constraints
    return repr((sorted(known.greens.items()), sorted(known.min_count.items()))).encode()


def _hard_arrays(state: GameState) -> tuple[np.ndarray, np.ndarray]:
    """Greens by position (-1 unknown) and minimum count per letter, for the numba search."""
    known = state.constraints
    greens = np.full(5, -1, dtype=np.int8)
    for pos, letter in known.greens.items():
        greens[pos] = ord(letter) - ord("a")
    mins = np.zeros(26, dtype=np.int8)
    for letter, least in known.min_count.items():
        mins[ord(letter) - ord("a")] = least
    return greens, mins
