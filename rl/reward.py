"""The one reward: how good an answer is at a position, component by component.

GRPO advantages and expert-iteration filtering both read this kernel, so "good"
means the same thing everywhere. Parsing is Python (the one strict parser in
llm/format.py, the thought checker in sft/cot.py); scoring a whole group is one
numba call over arrays, which also computes each guess's entropy with the solver's
own `score_rows` kernel.

An answer that cannot be played (no tags, malformed, several guesses, not five
letters, not an accepted word, a repeat) is not played by the game, so it scores the
floor, 0, whatever its kind: ranking one unplayable answer above another taught a
model to make up words instead of repeating them. A word refused earlier at this
turn is refused again for the same reason (the position has not changed), so it
scores the floor too. A playable answer earns, weighted:
- format + valid: the base credit for an answer the game accepts.
- consistent: the guess fits all feedback so far.
- fit: the share of the feedback tiles so far that the guess would have given had it
  been the secret; a graded `consistent` (1 exactly when it is). At a one-candidate
  position `consistent` is the win itself, so it rarely varies within a group; the share
  of tiles still tells "Pattern: S_IED ... stare" from "... shied", which is what a model
  that recites the clues and then names a word that breaks them has to learn.
- possible: the guess is one of the remaining candidates (could be the secret).
- info: the guess's entropy over the candidates / the best available.
- thought: the share of the thought's sentences that are true (sft/cot.py).
- win: the guess is the secret, plus a bonus for each guess left unused.

Everything is >= 0 (negative-only rewards made a model stall), every playable
answer scores more than any unplayable one, and `win` must exceed `info + thought`
(checked by `RewardWeights.check`) so that a win outscores every answer that does
not win.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, fields

import numpy as np
from numba import njit

from common.errors import UserError
from common.knobs import knob
from llm.format import FORMAT_FAILURES, parse_answer
from sft.cot import check_thought
from solver.entropy import score_rows
from solver.entropy_bound import EntropyBound
from solver.feedback import WIN, feedback_code, tiles_matched
from solver.setup import Setup
from solver.state import MAX_GUESSES, GameState

COMPONENTS = ("format", "valid", "consistent", "fit", "possible", "info", "thought", "win")
FORMAT, VALID, CONSISTENT, FIT, POSSIBLE, INFO, THOUGHT, WIN_COL = range(len(COMPONENTS))
MAX_WEIGHT = 100.0


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the components, all >= 0 (`speed` is the extra for a fast win)."""

    format: float = knob(0.2, "Credit for an answer in the answer format.", range=(0.0, MAX_WEIGHT))
    valid: float = knob(0.3, "Credit for a guess the game accepts.", range=(0.0, MAX_WEIGHT))
    consistent: float = knob(0.3, "Credit for a guess that fits all feedback so far.", range=(0.0, MAX_WEIGHT))
    fit: float = knob(0.0, "Credit times the share of the feedback tiles so far that the guess would have "
                      "given as the secret (a graded consistent).", range=(0.0, MAX_WEIGHT))
    possible: float = knob(0.2, "Credit for a guess that can still be the secret.", range=(0.0, MAX_WEIGHT))
    info: float = knob(1.0, "Weight of the guess's entropy over the best available.", range=(0.0, MAX_WEIGHT))
    thought: float = knob(0.5, "Weight of the share of the thought's sentences that are true.",
                          range=(0.0, MAX_WEIGHT))
    win: float = knob(2.0, "Credit for guessing the secret.", range=(0.0, MAX_WEIGHT))
    speed: float = knob(1.0, "Extra for a win on the first guess, falling linearly to 0 on the last.",
                        range=(0.0, MAX_WEIGHT))

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, f.name) for f in fields(self)], dtype=np.float64)

    def check(self, where: str = "reward") -> None:
        """A win must outscore every answer that does not win, and a playable one every unplayable one."""
        if not self.win > self.info + self.thought:
            raise UserError(f"{where}: reward.win ({self.win}) must exceed reward.info + reward.thought "
                            f"({self.info + self.thought}), or an answer that does not win can outscore a win")
        if not self.format + self.valid > 0:
            raise UserError(f"{where}: reward.format + reward.valid must be > 0, or a playable answer "
                            "can score the same as an unplayable one")

    @property
    def bounds(self) -> tuple[float, float]:
        """The lowest and highest total any answer can score."""
        return 0.0, sum(getattr(self, f.name) for f in fields(self))

    def to_json(self) -> dict:
        return asdict(self)


@njit(cache=True, inline="always")
def clue_tiles(codes: np.ndarray, row: int, history_rows: np.ndarray, history_patterns: np.ndarray,
               scratch: np.ndarray) -> int:
    """How many of the feedback tiles so far word `row` would have given had it been the secret
    (5 per turn for a word that fits every clue): the `consistent` and `fit` components."""
    tiles = 0
    for h in range(history_rows.shape[0]):
        tiles += tiles_matched(feedback_code(codes[history_rows[h]], codes[row], scratch), history_patterns[h])
    return tiles


@njit(cache=True)
def _fit_shares_kernel(codes: np.ndarray, rows: np.ndarray, history_rows: np.ndarray,
                       history_patterns: np.ndarray) -> np.ndarray:
    scratch = np.zeros(26, dtype=np.int8)
    turns = history_rows.shape[0]
    out = np.empty(rows.shape[0], dtype=np.float64)
    for i in range(rows.shape[0]):
        out[i] = clue_tiles(codes, rows[i], history_rows, history_patterns, scratch) / (5 * turns) if turns else 1.0
    return out


def fit_shares(state: GameState, rows: np.ndarray) -> np.ndarray:
    """The `fit` component of each allowed-word row as the guess at `state`, all at once: what a
    naming head is fitted toward (rl/naming_head.py)."""
    lists = state.lists
    history_rows = np.array([lists.index(t.guess) for t in state.turns], dtype=np.int64)
    history_patterns = np.array([t.pattern for t in state.turns], dtype=np.int64)
    return _fit_shares_kernel(lists.allowed_codes, rows, history_rows, history_patterns)


@njit(cache=True)
def reward_kernel(matrix: np.ndarray, codes: np.ndarray, rows: np.ndarray, thought_scores: np.ndarray,
                  candidates: np.ndarray, history_rows: np.ndarray, history_patterns: np.ndarray,
                  secret_column: int, turn: int, best_entropy: float,
                  weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(total, weighted components) for a group of answers at one position.

    `rows`: the guess's row in the allowed list, -1 where the answer cannot be played.
    `thought_scores`: the checked share of true sentences per answer. `history_*`: the
    turns so far. `secret_column`: -1 when the secret is unknown (nothing scores a win).
    `turn`: 1-based number of this guess. `weights`: RewardWeights.vector().
    """
    n = rows.shape[0]
    columns = len(weights) - 1  # every weight is a component's, but `speed` adds to the win's
    parts = np.zeros((n, columns), dtype=np.float64)
    playable = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        if rows[i] >= 0:
            playable[k] = rows[i]
            k += 1
    entropy, _ = score_rows(matrix, playable[:k], candidates)
    scratch = np.zeros(26, dtype=np.int8)
    speed = (MAX_GUESSES - turn) / (MAX_GUESSES - 1)
    turns = history_rows.shape[0]
    k = 0
    for i in range(n):
        row = rows[i]
        if row < 0:
            continue
        parts[i, FORMAT] = weights[FORMAT]
        parts[i, VALID] = weights[VALID]
        tiles = clue_tiles(codes, row, history_rows, history_patterns, scratch)
        if tiles == 5 * turns:
            parts[i, CONSISTENT] = weights[CONSISTENT]
        parts[i, FIT] = weights[FIT] * (tiles / (5 * turns) if turns else 1.0)
        possible = False
        for c in candidates:
            if matrix[row, c] == WIN:
                possible = True
                break
        if possible:
            parts[i, POSSIBLE] = weights[POSSIBLE]
        if best_entropy > 1e-12:
            parts[i, INFO] = weights[INFO] * min(1.0, max(0.0, entropy[k] / best_entropy))
        elif possible:
            parts[i, INFO] = weights[INFO]  # one candidate left: only guessing it is informative
        k += 1
        parts[i, THOUGHT] = weights[THOUGHT] * thought_scores[i]
        if secret_column >= 0 and matrix[row, secret_column] == WIN:
            parts[i, WIN_COL] = weights[WIN_COL] + weights[WIN_COL + 1] * speed
    total = np.zeros(n, dtype=np.float64)
    for i in range(n):
        for c in range(columns):
            total[i] += parts[i, c]
    return total, parts


@dataclass(frozen=True)
class ParsedGroup:
    """What the parser read from each answer, as the arrays the kernel takes."""

    guesses: tuple[str | None, ...]
    failures: tuple[str | None, ...]  # None for a playable answer, else the parser's reason it cannot be
    thoughts: tuple[str | None, ...]
    rows: np.ndarray  # row of the guess in the allowed list; -1 when the answer cannot be played

    @property
    def playable(self) -> np.ndarray:
        """Answers that can be played: a parsed, accepted, new word."""
        return np.array([f is None for f in self.failures], dtype=bool)

    @property
    def format_ok(self) -> np.ndarray:
        return np.array([f not in FORMAT_FAILURES for f in self.failures], dtype=bool)


def parse_group(texts: list[str], state: GameState) -> ParsedGroup:
    lists = state.lists
    parsed = [parse_answer(text, lists, state.guesses) for text in texts]
    rows = np.array([lists.index(p.guess) if p.failure is None else -1 for p in parsed], dtype=np.int64)
    return ParsedGroup(tuple(p.guess for p in parsed), tuple(p.failure for p in parsed),
                       tuple(p.thought for p in parsed), rows)


@dataclass(frozen=True)
class GroupRewards:
    total: np.ndarray  # (n,)
    components: np.ndarray  # (n, len(COMPONENTS)), weighted: rows sum to `total`
    parsed: ParsedGroup

    def component(self, name: str) -> np.ndarray:
        return self.components[:, COMPONENTS.index(name)]

    @property
    def guess_quality(self) -> np.ndarray:
        """The reward without the thought's credit: how good the move itself is."""
        return self.total - self.components[:, THOUGHT]

    def tied(self, threshold: float = 1e-9) -> bool:
        """True when the rewards span less than `threshold`: the group carries no GRPO signal."""
        return bool(np.ptp(self.total) < threshold) if len(self.total) else True


class RewardScorer:
    """Scores groups of answers at positions of one setup (lists + pattern matrix).

    The best entropy available at a position is computed once per candidate set
    (every game shares its opening position) and kept in a bounded memo.
    """

    def __init__(self, setup: Setup, weights: RewardWeights = RewardWeights(), memo_size: int = 4096) -> None:
        weights.check()
        self.setup = setup
        self.weights = weights
        self._weights = weights.vector()
        self._all_rows = np.arange(len(setup.lists.allowed), dtype=np.int64)
        self._bound = EntropyBound.for_lists(setup.lists, setup.secret_kind)
        self._columns = {w: i for i, w in enumerate(setup.lists.secrets(setup.secret_kind))}
        self._best: OrderedDict[bytes, float] = OrderedDict()
        self._memo_size = memo_size

    def best_entropy(self, state: GameState) -> float:
        key = state.candidates.tobytes()
        if key in self._best:
            self._best.move_to_end(key)
            return self._best[key]
        best = 0.0
        if len(state.candidates):
            _, best = self._bound.most_informative(self.setup.matrix, self._all_rows, state.candidates)
        self._best[key] = best
        if len(self._best) > self._memo_size:
            self._best.popitem(last=False)
        return best

    def score_rows(self, rows: np.ndarray, state: GameState, secret: str) -> np.ndarray:
        """The total reward of each allowed-list row as the guess at `state` (-1: unplayable),
        with no thought credit: a naming head chooses the word, not the thought (rl/head_policy.py)."""
        lists = self.setup.lists
        history_rows = np.array([lists.index(t.guess) for t in state.turns], dtype=np.int64)
        history_patterns = np.array([t.pattern for t in state.turns], dtype=np.int64)
        total, _ = reward_kernel(self.setup.matrix, lists.allowed_codes, rows.astype(np.int64),
                                 np.zeros(len(rows)), state.candidates, history_rows, history_patterns,
                                 self._columns.get(secret, -1), len(state.turns) + 1, self.best_entropy(state),
                                 self._weights)
        return total

    def score(self, texts: list[str], state: GameState, secret: str | None = None) -> GroupRewards:
        """Rewards of `texts` answered at `state` (a win only counts when `secret` is given)."""
        parsed = parse_group(texts, state)
        lists = self.setup.lists
        thought_scores = np.array([check_thought(state, t, g).score if f is None else 0.0
                                   for t, g, f in zip(parsed.thoughts, parsed.guesses, parsed.failures)])
        history_rows = np.array([lists.index(t.guess) for t in state.turns], dtype=np.int64)
        history_patterns = np.array([t.pattern for t in state.turns], dtype=np.int64)
        column = self._columns.get(secret, -1) if secret is not None else -1
        total, parts = reward_kernel(self.setup.matrix, lists.allowed_codes, parsed.rows, thought_scores,
                                     state.candidates, history_rows, history_patterns, column,
                                     len(state.turns) + 1, self.best_entropy(state), self._weights)
        return GroupRewards(total, parts, parsed)
