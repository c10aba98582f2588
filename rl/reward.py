"""The one reward: how good an answer is at a position, component by component.

GRPO advantages, expert-iteration filtering and eval's per-guess figures all read
this kernel, so "good" means the same thing everywhere. Parsing is Python (the one
strict parser in llm/format.py); scoring a whole group is one numba call over arrays,
which also computes each guess's entropy with the solver's own `score_rows` kernel.

Components (weighted, they sum to the total):
- format: the answer parses as exactly one `<think>..</think><guess>..</guess>`.
- valid: the guess is an accepted, new word.
- consistent: the guess could still be the secret given all feedback so far.
- info: the guess's entropy over the remaining candidates / the best available.
- win: the guess is the secret, plus a bonus for each guess left unused.
- repeat: a penalty for replaying an earlier guess.

Everything a model can earn is positive except the repeat penalty: negative-only
rewards made a model stall (NOTES.md). An invalid word or a repeat earns at most the
format credit, so neither can outscore a valid, consistent guess.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, fields

import numpy as np
from numba import njit

from llm.format import ALREADY_GUESSED, FORMAT_FAILURES, parse_answer
from solver.entropy import score_rows
from solver.entropy_bound import EntropyBound
from solver.feedback import WIN, feedback_code
from solver.setup import Setup
from solver.state import MAX_GUESSES, GameState

COMPONENTS = ("format", "valid", "consistent", "info", "win", "repeat")
FORMAT, VALID, CONSISTENT, INFO, WIN_COL, REPEAT = range(len(COMPONENTS))
MAX_WEIGHT = 100.0


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the components; all >= 0 (`repeat` is subtracted)."""

    format: float = 0.2
    valid: float = 0.3
    consistent: float = 0.5
    info: float = 1.0
    win: float = 2.0
    speed: float = 1.0  # extra for a win on the first guess, falling linearly to 0 on the last
    repeat: float = 0.5

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, f.name) for f in fields(self)], dtype=np.float64)

    @property
    def bounds(self) -> tuple[float, float]:
        """The lowest and highest total any answer can score."""
        return -self.repeat, self.format + self.valid + self.consistent + self.info + self.win + self.speed

    def to_json(self) -> dict:
        return asdict(self)


@njit(cache=True)
def reward_kernel(matrix: np.ndarray, codes: np.ndarray, rows: np.ndarray, format_ok: np.ndarray,
                  repeated: np.ndarray, candidates: np.ndarray, history_rows: np.ndarray,
                  history_patterns: np.ndarray, secret_column: int, turn: int, best_entropy: float,
                  weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(total, weighted components) for a group of answers at one position.

    `rows`: the guess's row in the allowed list, -1 where the answer has no playable
    word (format failure or not an accepted word). `repeated`: the word was played
    before. `history_*`: the turns so far. `secret_column`: -1 when the secret is
    unknown (then nothing scores a win). `turn`: 1-based number of this guess.
    `weights`: RewardWeights.vector().
    """
    n = rows.shape[0]
    parts = np.zeros((n, 6), dtype=np.float64)
    new_rows = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        if rows[i] >= 0 and not repeated[i]:
            new_rows[k] = rows[i]
            k += 1
    entropy, _ = score_rows(matrix, new_rows[:k], candidates)
    scratch = np.zeros(26, dtype=np.int8)
    speed = (MAX_GUESSES - turn) / (MAX_GUESSES - 1)
    k = 0
    for i in range(n):
        if format_ok[i]:
            parts[i, 0] = weights[0]
        if repeated[i]:
            parts[i, 5] = -weights[6]
            continue
        row = rows[i]
        if row < 0:
            continue
        parts[i, 1] = weights[1]
        consistent = True
        for h in range(history_rows.shape[0]):
            if feedback_code(codes[history_rows[h]], codes[row], scratch) != history_patterns[h]:
                consistent = False
                break
        if consistent:
            parts[i, 2] = weights[2]
        if best_entropy > 1e-12:
            parts[i, 3] = weights[3] * min(1.0, max(0.0, entropy[k] / best_entropy))
        elif consistent:
            parts[i, 3] = weights[3]  # one candidate left: only guessing it is informative
        k += 1
        if secret_column >= 0 and matrix[row, secret_column] == WIN:
            parts[i, 4] = weights[4] + weights[5] * speed
    total = np.zeros(n, dtype=np.float64)
    for i in range(n):
        for c in range(6):
            total[i] += parts[i, c]
    return total, parts


@dataclass(frozen=True)
class ParsedGroup:
    """What the parser read from each answer, as the arrays the kernel takes."""

    guesses: tuple[str | None, ...]
    failures: tuple[str | None, ...]
    rows: np.ndarray
    format_ok: np.ndarray
    repeated: np.ndarray

    @property
    def playable(self) -> np.ndarray:
        """Answers that can be played: a parsed, accepted, new word."""
        return np.array([f is None for f in self.failures], dtype=bool)


def parse_group(texts: list[str], state: GameState) -> ParsedGroup:
    lists = state.lists
    parsed = [parse_answer(text, lists, state.guesses) for text in texts]
    rows = np.array([lists.index(p.guess) if p.failure in (None, ALREADY_GUESSED) else -1 for p in parsed],
                    dtype=np.int64)
    return ParsedGroup(
        guesses=tuple(p.guess for p in parsed),
        failures=tuple(p.failure for p in parsed),
        rows=rows,
        format_ok=np.array([p.failure not in FORMAT_FAILURES for p in parsed], dtype=np.bool_),
        repeated=np.array([p.failure == ALREADY_GUESSED for p in parsed], dtype=np.bool_),
    )


@dataclass(frozen=True)
class GroupRewards:
    total: np.ndarray  # (n,)
    components: np.ndarray  # (n, len(COMPONENTS)), weighted: rows sum to `total`
    parsed: ParsedGroup

    def component(self, name: str) -> np.ndarray:
        return self.components[:, COMPONENTS.index(name)]

    @property
    def tied(self) -> bool:
        """True when every answer scored the same: the group carries no GRPO signal."""
        return bool(np.ptp(self.total) <= 1e-9) if len(self.total) else True


class RewardScorer:
    """Scores groups of answers at positions of one setup (lists + pattern matrix).

    The best entropy available at a position is computed once per candidate set
    (every game shares its opening position) and kept in a bounded memo.
    """

    def __init__(self, setup: Setup, weights: RewardWeights = RewardWeights(), memo_size: int = 4096) -> None:
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

    def score(self, texts: list[str], state: GameState, secret: str | None = None) -> GroupRewards:
        """Rewards of `texts` answered at `state` (a win only counts when `secret` is given)."""
        parsed = parse_group(texts, state)
        lists = self.setup.lists
        history_rows = np.array([lists.index(t.guess) for t in state.turns], dtype=np.int64)
        history_patterns = np.array([t.pattern for t in state.turns], dtype=np.int64)
        column = self._columns.get(secret, -1) if secret is not None else -1
        total, parts = reward_kernel(self.setup.matrix, lists.allowed_codes, parsed.rows, parsed.format_ok,
                                     parsed.repeated, state.candidates, history_rows, history_patterns, column,
                                     len(state.turns) + 1, self.best_entropy(state), self._weights)
        return GroupRewards(total, parts, parsed)
