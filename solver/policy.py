"""Policies: a state goes in, a guess comes out.

`Policy` is the small interface the eval harness, the SFT generator and RL all call.
`EntropySolver` is the expert: greedy maximum entropy over every allowed guess with
ties going to possible answers, or a lookahead that scores the top-k guesses by the
expected guesses to finish (solver/lookahead.py), optionally in hard mode. Either way
the first guess is the one whose whole decision tree does best (solver/opener.py),
and from SAFE_FROM guesses left (HARD_SAFE_FROM in hard mode, ALLOWED_SAFE_FROM with the
allowed list as secrets) a move must come with a proof that it wins every candidate in
time (solver/safety.py) where the search finds one: averages alone lose families like
_OUND in hard mode or _ILLS among the 12,972 allowed words.

Decisions are memoised by position, so playing all 2,315 answers costs about as much
as walking the decision tree once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from common.cache_files import load_entry, save_entry
from common.fileio import cache_dir
from solver.entropy import ROW_WISE_FROM, score_guesses
from solver.entropy_bound import EntropyBound
from solver.feedback import WIN
from solver.lookahead import FAIL_PENALTY, LOSS_LINE, distinct_splits, lookahead_costs
from solver.opener import COMPLETE_OPENERS, OPENER_VERSION, best_opener, opener_shortlist_size, walk_progress
from solver.safety import finishing_guess
from solver.state import MAX_GUESSES, GameState, Turn

POOL_SIZE = 400  # follow-up guesses the lookahead tries: the best splitters of the position
DEPTH = 2  # guesses searched before the estimate (exact anyway once two guesses are left)
ENDGAME_TURNS = 3  # from here on even greedy looks ahead, to avoid running out of guesses
VERIFY_FROM = 5  # with this many guesses left the lookahead's leaves are estimates: verify
VERIFY_MAX = 3  # rival guesses re-scored by playing on
WIDE_VERIFY_MAX = 30  # the same, when every shortlisted guess risks a loss
OPENERS_FILE = "openers.json"  # first guesses, keyed by word lists, secret list and settings
RISK_SPLITTERS = 30  # rivals tried far from the end when every checked guess risks a loss
SAFE_FROM = 4  # guesses left from which a move must provably win every candidate in time, where one can
HARD_SAFE_FROM = 5  # the same in hard mode, which locks letters early (checking a move then decides its
# every follow-up: from 5 in normal mode that made gen-sft 6x slower, for a loss or two among allowed secrets)
ALLOWED_SAFE_FROM = 5  # the same with the 12,972 allowed words as secrets: families like _IVES and _ESTS are
# lost a guess before 4 are left there; the answers list (gen-sft's) keeps SAFE_FROM and its speed
PROVE_EXACT_FROM = 4  # guesses left from which that proof is one exact search (earlier it plays the policy on)
PROVE_RIVALS = 30  # strong splitters tried when the chosen move is not proven


class Policy(Protocol):
    name: str

    def choose(self, state: GameState) -> str:
        """The next guess for a game that is not over."""


TOP_K = 12  # guesses the lookahead examines at each position
HARD_TOP_K = 20  # in hard mode: fewer legal guesses, and a wider look pays (answers mean 3.5140 at 12 and 16,
# 3.5114 at 20 and 24, 3.5132 at 30; normal mode is best at 12: 3.4225, 3.4242 at 20)


@dataclass(frozen=True)
class SolverSettings:
    hard: bool = False
    lookahead: bool = False
    top_k: int | None = None  # None: TOP_K, or HARD_TOP_K in hard mode

    def __post_init__(self) -> None:
        if self.top_k is None:
            object.__setattr__(self, "top_k", self.default_top_k)

    @property
    def default_top_k(self) -> int:
        return HARD_TOP_K if self.hard else TOP_K

    @property
    def label(self) -> str:
        parts = ["lookahead" if self.lookahead else "greedy"]
        if self.lookahead or self.top_k != self.default_top_k:  # greedy's end game reads it too
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
        self._opener: str | None = None
        self._letter_counts = _letter_counts(self.lists.allowed_codes)
        self._candidate_rows = (
            self.lists.answer_rows if self.secret_kind == "answers" else np.arange(len(self.lists.allowed))
        )
        self._bound = EntropyBound.for_lists(self.lists, self.secret_kind)
        self.safe_from = _safe_from(settings, self.secret_kind)

    # -- public --------------------------------------------------------------------
    def choose(self, state: GameState) -> str:
        if not state.turns:
            return self.opener()
        return self.lists.allowed[self._solve(state).row]

    def opener(self, show_progress: bool = False) -> str:
        """First guess, computed once per word lists, secret list and settings, then read from
        disk once per solver (every game starts here). Computing it walks whole decision
        trees (minutes with the allowed list as secrets): `show_progress` shows them."""
        if self._opener is None:
            self._opener = self._stored_opener(show_progress)
        return self._opener

    def _stored_opener(self, show_progress: bool) -> str:
        path = cache_dir() / OPENERS_FILE
        key = f"{self.lists.fingerprint}-{self.secret_kind}-{self.settings.label}-v{OPENER_VERSION}"
        opener = load_entry(path, key)
        if not (isinstance(opener, str) and self.lists.is_allowed(opener)):  # missing, or damaged: recompute
            root = self._root()
            shortlist = [s.word for s in self.rank(root, opener_shortlist_size(len(root.candidates)))]
            complete = COMPLETE_OPENERS if self.secret_kind == "allowed" else ()
            with walk_progress(len(root.candidates), show_progress) as on_settled:
                opener = best_opener(self.choose, root, shortlist, complete, on_settled)
            save_entry(path, key, opener)
        return opener

    def for_histories(self) -> EntropySolver:
        """The solver that plays the earlier turns of start states (RL's, the endgame data's).
        A history needs no proof that its moves win every candidate in time: a later turn is
        anyone's, and a loss after the start state does not matter. With the 12,972 allowed
        words as secrets those proofs start 5 guesses out and made RL's endgame start states
        too slow to draw (not 2 in 5 minutes, against 20 in 5 s without them), so there this
        is a proof-free twin with its own memo. With the answers list it is this solver
        itself: fast there, and every stored benchmark position was drawn with it."""
        if self.secret_kind != "allowed":
            return self
        twin = EntropySolver(self._root(), self.settings)
        twin.safe_from = 0  # no guesses-left count is <= 0: nothing is proven
        return twin

    def load_kernels(self, show_progress: bool = False) -> None:
        """Decide a few positions with a throwaway solver of the same settings, so that the
        compiled kernels a decision uses are loaded (numba reads them from its disk cache
        on first call, about half a second in all; in a fresh checkout it compiles them,
        about 15 s) while this solver's memo stays empty: a timed run then measures
        decisions, not start-up. The positions: the solver's own game against the first
        secret, and those after one, two and three weak guesses (the list's first words):
        large positions, and an endgame, where even greedy play searches ahead."""
        for size in (1, ROW_WISE_FROM):  # the scorer's two kernels, by candidate count
            score_guesses(self.matrix, np.arange(1), np.arange(min(size, self.matrix.shape[1])))
        throwaway = EntropySolver(self._root(), self.settings)
        throwaway._opener = self.opener(show_progress)
        state = self._root()
        while not state.over:
            guess = throwaway.choose(state)
            state = state.play(guess, int(self.matrix[self.lists.index(guess), 0]))
        for column in range(self.matrix.shape[1]):
            state = self._root()
            for row in range(MAX_GUESSES - ENDGAME_TURNS):
                state = state.play(self.lists.allowed[row], int(self.matrix[row, column]))
                if state.won or len(state.candidates) <= 2:
                    break
                throwaway.choose(state)
            else:
                return

    def rank(self, state: GameState, top: int = 5) -> list[Scored]:
        """The best guesses at `state` by entropy, as the solver sees them."""
        rows, entropy, expected, is_cand = self._by_entropy(state)
        return [Scored(self.lists.allowed[r], float(e), float(x), bool(c))
                for r, e, x, c in zip(rows[:top], entropy[:top], expected[:top], is_cand[:top])]

    def best_candidate(self, state: GameState) -> str:
        """The most informative guess among the words that can still be the secret
        (ties to list order): the best move that also fits every clue so far."""
        rows = self._candidate_rows[state.candidates]
        entropy, _ = score_guesses(self.matrix, rows, state.candidates)
        return self.lists.allowed[int(rows[int(np.argmax(entropy))])]

    def memo_tables(self) -> dict[str, dict[bytes, Decision]]:
        """The memo, by key: positions played (`played`) and positions only looked at
        while verifying a guess (`looked`); solver/decision_store.py keeps them on disk."""
        return {"played": self._memo, "looked": self._quick}

    def decide_afresh(self, key: bytes) -> Decision | None:
        """The solver's quick decision (what the `looked` memo table keeps) at the position `key`
        stands for, searched again (solver/decision_store.py checks stored decisions against it), or
        None where the key alone cannot say: in hard mode it holds the hints but not the turns that
        gave them, and where a decision plays on (verification far from the end) it also depends on
        what the memo already holds. Near the end (a proof is one exact search) and for the plain
        greedy move it depends on the position alone."""
        guesses_left = key[-1]
        greedy = not self.settings.lookahead and guesses_left > max(ENDGAME_TURNS, self.safe_from)
        if self.settings.hard or not (guesses_left <= PROVE_EXACT_FROM or greedy) or (len(key) - 1) % 8:
            return None
        candidates = np.frombuffer(key[:-1], dtype=np.int64).copy()
        played = (Turn("", 0),) * (MAX_GUESSES - guesses_left)  # outside hard mode only their number counts
        state = GameState(self.lists, self.matrix, self.secret_kind, played, candidates)
        return self._decide(state)

    # -- internals -----------------------------------------------------------------
    def _root(self) -> GameState:
        return GameState(self.lists, self.matrix, self.secret_kind)

    def _by_entropy(self, state: GameState) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Legal guess rows, most entropy first (ties to candidates, then list order),
        with their entropy, expected candidates left and candidate flags."""
        rows = self._legal_rows(state)
        entropy, expected = score_guesses(self.matrix, rows, state.candidates)
        is_cand = self._is_candidate_row(state)[rows]
        order = np.lexsort((~is_cand, -entropy))
        return rows[order], entropy[order], expected[order], is_cand[order]

    def _greedy_row(self, state: GameState) -> int:
        """The first row `_by_entropy` would rank, without sorting all 12,972 guesses
        (the sort cost more than the scoring in small positions) and, in large
        positions, without scoring the guesses whose letters cannot reach the best."""
        tied, _ = self._bound.most_informative(self.matrix, self._legal_rows(state), state.candidates)
        tied_candidates = tied[self._is_candidate_row(state)[tied]]
        return int((tied_candidates if len(tied_candidates) else tied)[0])

    def _solve(self, state: GameState, widen: bool = True) -> Decision:
        """The decision at `state`, memoised.

        When the decision expects a loss, rivals that split the secrets at risk are
        tried (`widen`). Positions that are only being looked at to verify a guess
        skip that (it is slow there, and rarely changes which guess wins); the
        positions that are actually played get it.
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
        pool = None
        if not self.settings.lookahead and state.guesses_left > ENDGAME_TURNS:
            decision = Decision(self._greedy_row(state), np.nan)
        else:
            shortlist, pool = self._shortlist_and_pool(state)
            decision = self._best_of(state, shortlist, pool, VERIFY_MAX)
        if state.guesses_left <= self.safe_from:
            if pool is None:
                _, pool = self._shortlist_and_pool(state)
            return self._made_safe(state, decision, pool)
        return decision

    def _made_safe(self, state: GameState, decision: Decision, pool: np.ndarray) -> Decision:
        """`decision`, if it provably wins every candidate in time; else the best-ranked
        guess that does: first among the position's strong splitters, then among the
        guesses that best split the secrets the decision cannot prove (a family like
        _ILLS needs words rich in its first letters). Where proofs start 5 guesses out
        (hard mode, the allowed list as secrets), last among every other move a proof
        counts on (the rest of the pool, the candidates): a proof one turn up checks the
        move played here, and without this step a position it had proven could be played
        with a move that loses (after LANTS, the lookahead lost JILLS in a subtree its
        own check had proven). The answers list proves from 4, never loses, and keeps
        gen-sft's speed. If none does, `decision` stands."""
        if self._proven(state, decision.row, pool):
            return decision
        tried = pool[:PROVE_RIVALS]
        row = self._first_proven(state, tried, pool)
        if row < 0:
            splitters = self._splitters_of(state, decision.row)
            row = self._first_proven(state, splitters, pool)
            tried = np.concatenate([tried, splitters])
        if row < 0 and self.safe_from > SAFE_FROM:  # rare; 3 minutes after LANTS 10002
            row = self._first_proven(state, self._untried_proof_moves(state, pool, tried), pool)
        if row < 0:
            return decision
        if self.settings.lookahead or state.guesses_left <= ENDGAME_TURNS:
            return Decision(row, float(self._costs(state, np.array([row]), pool, np.inf)[0]))
        return Decision(row, np.nan)

    def _untried_proof_moves(self, state: GameState, pool: np.ndarray, tried: np.ndarray) -> np.ndarray:
        """The moves an exact proof tries at a position, in its order (the pool, then the
        candidates: always legal, in hard mode too), each once and without those in `tried`
        (far from the end each costs about a second to prove)."""
        moves = np.concatenate([pool, self._candidate_rows[state.candidates]])
        moves = moves[np.sort(np.unique(moves, return_index=True)[1])]
        return moves[~np.isin(moves, tried)]

    def _proven(self, state: GameState, row: int, pool: np.ndarray | None = None) -> bool:
        """Does `row` provably win every candidate in time? Exactly (within the pool) from
        PROVE_EXACT_FROM guesses left; with more, when the policy's own move in every position
        it leads to is proven. `pool`: the position's follow-up pool, when already scored."""
        if state.guesses_left <= PROVE_EXACT_FROM:
            return self._first_proven(state, np.array([row]), pool) == row
        return all(self._finishes(child) for child in self._children(state, row))

    def _finishes(self, state: GameState) -> bool:
        """Does the policy's own move at `state` provably win every candidate in time?"""
        if len(state.candidates) <= state.guesses_left:  # guessing them one by one does
            return True
        return state.guesses_left >= 2 and self._proven(state, self._solve(state).row)

    def _first_proven(self, state: GameState, rows: np.ndarray, pool: np.ndarray | None = None) -> int:
        """The first of `rows` (those legal here) that provably wins every candidate in time, or < 0."""
        if self.settings.hard:
            rows = rows[np.isin(rows, self._legal_rows(state))]
        if state.guesses_left > PROVE_EXACT_FROM:
            return next((int(row) for row in rows if self._proven(state, int(row), pool)), -1)
        if pool is None:
            _, pool = self._shortlist_and_pool(state)
        greens, mins = _hard_arrays(state)
        game = (self.matrix, self.lists.allowed_codes, self._letter_counts, self._candidate_rows, pool)
        return finishing_guess(game, rows, state.candidates, state.guesses_left, self.settings.hard, greens, mins)

    def _splitters_of(self, state: GameState, row: int) -> np.ndarray:
        """The legal guesses that best split the secrets `row` leaves in positions not proven to finish."""
        unproven = [child.candidates for child in self._children(state, row) if not self._finishes(child)]
        return self._risk_splitters(state, np.concatenate(unproven)) if unproven else np.empty(0, dtype=np.int64)

    def _risk_splitters(self, state: GameState, at_risk: np.ndarray) -> np.ndarray:
        """The RISK_SPLITTERS legal guesses with the most entropy over the secrets `at_risk`."""
        rows, _, _, _ = self._by_entropy(state)
        risk_entropy, _ = score_guesses(self.matrix, rows, at_risk)
        return rows[np.argsort(-risk_entropy, kind="stable")[:RISK_SPLITTERS]]

    def _shortlist_and_pool(self, state: GameState) -> tuple[np.ndarray, np.ndarray]:
        """Guesses to score (the top k by entropy; near the end all candidates too) and
        the pool of follow-ups the lookahead tries (the top few hundred).

        Guesses that tell nothing are dropped. Outside hard mode, guesses that split
        the candidates the same way are the same move, so only the best-ranked of each
        is kept: in small positions the pool then holds every distinct split, not a
        few hundred copies of a few. (In hard mode the letters themselves matter:
        they decide which guesses stay legal later.)
        """
        rows, entropy, _, is_cand = self._by_entropy(state)
        ranked = rows[: np.count_nonzero(entropy > 0) or 1]
        if not self.settings.hard:
            ranked = ranked[distinct_splits(self.matrix, ranked, state.candidates, POOL_SIZE)]
        shortlist = ranked[: self.settings.top_k]
        if state.guesses_left <= ENDGAME_TURNS:
            shortlist = np.concatenate([shortlist, np.setdiff1d(rows[is_cand], shortlist)])
        return shortlist, ranked[:POOL_SIZE]

    def _best_of(self, state: GameState, shortlist: np.ndarray, pool: np.ndarray, verify_max: int) -> Decision:
        """The shortlisted guess with the lowest lookahead cost (verified far from the end).

        The first guess is scored alone so that its cost can cut the others short.
        """
        first = self._costs(state, shortlist[:1], pool, np.inf)
        costs = np.concatenate([first, self._costs(state, shortlist[1:], pool, first[0])])
        if state.guesses_left >= VERIFY_FROM:
            return self._verified(state, shortlist, costs, verify_max)
        best = int(np.argmin(costs))
        return Decision(int(shortlist[best]), float(costs[best]))

    def _costs(self, state: GameState, shortlist: np.ndarray, pool: np.ndarray, cutoff: float) -> np.ndarray:
        greens, mins = _hard_arrays(state)
        game = (self.matrix, self.lists.allowed_codes, self._letter_counts, self._candidate_rows, pool)
        return lookahead_costs(game, shortlist, state.candidates, state.guesses_left, DEPTH, self.settings.hard,
                               greens, mins, cutoff)

    def _verified(self, state: GameState, shortlist: np.ndarray, costs: np.ndarray, verify_max: int) -> Decision:
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
            cost = self._cost_after(state, int(shortlist[i]))
            if cost < best.cost:
                best = Decision(int(shortlist[i]), cost)
        return best

    def _cost_after(self, state: GameState, row: int) -> float:
        """Expected guesses to finish when `row` is played now and the policy plays on."""
        total = 1.0
        for child in self._children(state, row):
            total += len(child.candidates) / len(state.candidates) * self._solve(child, widen=False).cost
        return total

    def _children(self, state: GameState, row: int) -> list[GameState]:
        """The positions `row` can lead to, one per feedback other than the win."""
        word = self.lists.allowed[row]
        patterns = np.unique(self.matrix[row][state.candidates])
        return [state.play(word, int(p)) for p in patterns if p != WIN]

    def _safe_rival(self, state: GameState, risky: Decision) -> Decision:
        """`risky` expects a loss: the best of the legal guesses that best split the
        secrets it would leave in losing positions (from the whole list, not the
        pool: a family like _ILLS needs words rich in its first letters), or
        NO_DECISION."""
        at_risk = [c.candidates for c in self._children(state, risky.row)
                   if self._solve(c, widen=False).cost > LOSS_LINE]
        if not at_risk:
            return NO_DECISION
        _, pool = self._shortlist_and_pool(state)
        return self._best_of(state, self._risk_splitters(state, np.concatenate(at_risk)), pool, WIDE_VERIFY_MAX)

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


def _safe_from(settings: SolverSettings, secret_kind: str) -> int:
    """Guesses left from which a move must come with a proof. Hard mode and the allowed list
    prove from 5: their families (_OUND, _IVES, _ESTS) can be lost with 4 guesses left
    already. The answers list proves from 4, where no game is lost and proving from 5
    would make every game slower (gen-sft 82 examples/s against 553) for nothing."""
    if settings.hard:
        return HARD_SAFE_FROM
    return ALLOWED_SAFE_FROM if secret_kind == "allowed" else SAFE_FROM


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


class CandidatePolicy:
    """The solver kept to words that can still be the secret.

    A model that cannot yet weigh information well wins by guessing words that fit
    the clues; the solver's own move is often a word that cannot be the answer
    (a third of its guesses after the opener), which such a model copies badly.
    """

    name = "candidates"

    def __init__(self, solver: EntropySolver) -> None:
        self.solver = solver

    def choose(self, state: GameState) -> str:
        return self.solver.best_candidate(state)


EXPERTS = ("solver", "candidates")


def expert_policy(solver: EntropySolver, expert: str) -> Policy:
    """The teacher `expert` names: the solver's own moves, or its best among the words
    that can still be the secret. SFT data (gen-sft --expert) and RL's expert iteration
    (ei.expert) pick their teacher here."""
    if expert not in EXPERTS:
        raise ValueError(f"unknown expert {expert!r}")
    return CandidatePolicy(solver) if expert == "candidates" else solver
