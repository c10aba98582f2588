"""Choosing the first guess by playing the policy's whole decision tree.

The best first word for a policy is not the one with the most information: it is the
one after which *that policy* finishes every secret fastest. Because the policy is
deterministic and memoised by position, its games against every secret form one
tree; walking it by splitting the candidates at each node costs about as much as one
pass of the eval, so a shortlist of openers can be compared exactly.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
from rich.progress import TaskID

from common.progress import progress_bar
from solver.feedback import WIN
from solver.state import MAX_GUESSES, GameState

OPENER_VERSION = 8  # part of the cache key: bump when the choice of opener changes
OPENER_WORK = 25_000
FAIL_COST = 1_000_000  # in guesses: any opener that loses a game ranks below every one that does not
# Openers from which every one of the 12,972 allowed words can be won in six (alex1770/wordle's
# bighidden trees list the few that can; they rank ~900-1,100 by entropy, far outside any
# shortlist), LANTS best of all (4.0777 at the optimum). With the allowed list as secrets the
# lookahead loses none after LANTS (mean 4.0889) or PRATE (4.1240). Tried in this order, before
# the shortlist, when the secrets are the allowed list.
COMPLETE_OPENERS = ("lants", "prate", "trape", "peart")


@dataclass
class TreeResult:
    """Outcome of one opener over every secret: `wins[t]` games won in t+1 guesses."""

    wins: np.ndarray = field(default_factory=lambda: np.zeros(MAX_GUESSES, dtype=np.int64))
    fails: int = 0

    @property
    def games(self) -> int:
        return int(self.wins.sum()) + self.fails

    @property
    def total_guesses(self) -> int:
        return int((self.wins * np.arange(1, MAX_GUESSES + 1)).sum())

    @property
    def mean(self) -> float:
        return self.total_guesses / max(1, self.games)


def play_tree(choose, root: GameState, first: str, bound: float = np.inf,
              on_settled: Callable[[str, int], None] | None = None) -> TreeResult | None:
    """Play `first`, then `choose(state)` at every position, against all candidates at once.

    Returns None as soon as the guesses spent plus the fewest still needed exceed
    `bound` (a rival opener already did better), so losing openers stop early.
    """
    result = TreeResult()
    spent = 0
    owed = len(root.candidates)  # lower bound still to pay: one guess per unsolved secret
    if on_settled is not None:
        on_settled(first, 0)  # shown now: the first node settles no game until every move after it is decided
    stack = [(root, first)]
    while stack:
        state, guess = stack.pop()
        row = root.matrix[root.lists.index(guess)]
        patterns = row[state.candidates]
        turn = len(state.turns) + 1
        owed -= len(state.candidates) * turn  # what was owed for these secrets when they were pushed
        for pattern in np.unique(patterns):
            size = int(np.count_nonzero(patterns == pattern))
            if pattern == WIN:
                result.wins[turn - 1] += 1
                spent += turn
            elif turn == MAX_GUESSES:
                result.fails += size
                spent += FAIL_COST * size
            else:
                owed += size * (turn + 1)
                child = state.play(guess, int(pattern))
                stack.append((child, choose(child)))
        if on_settled is not None:
            on_settled(first, len(patterns) if turn == MAX_GUESSES else int(np.count_nonzero(patterns == WIN)))
        if spent + owed > bound:
            return None
    return result


def tree_cost(result: TreeResult) -> float:
    """What opener selection minimises: failures first, then total guesses."""
    return result.fails * FAIL_COST + result.total_guesses


def opener_shortlist_size(n_secrets: int) -> int:
    """How many openers to play out: about 25,000 secret-games of work, 2 to 12 openers."""
    return max(2, min(12, OPENER_WORK // n_secrets))


def best_opener(choose, root: GameState, shortlist: list[str], complete: tuple[str, ...] = (),
                on_settled: Callable[[str, int], None] | None = None) -> str:
    """The first of `complete` (openers known to allow winning every game) whose tree loses
    none; else the opener in `shortlist` whose tree loses fewest games, then uses fewest guesses.

    `complete` is walked first, each walk stopping at its first lost game: with the allowed
    list as secrets no shortlisted opener can win every game, and walking one costs minutes
    of proof search at the positions it cannot win. Never losing comes before a lower mean.
    `on_settled(opener, games)` hears of the games each walk settles (progress).
    """
    for word in complete:
        if root.lists.is_allowed(word) and play_tree(choose, root, word, FAIL_COST - 1, on_settled) is not None:
            return word
    best, best_cost = shortlist[0], np.inf
    for word in shortlist:
        result = play_tree(choose, root, word, best_cost, on_settled)
        if result is not None and tree_cost(result) < best_cost:
            best, best_cost = word, tree_cost(result)
    return best


@contextmanager
def walk_progress(games: int, show: bool) -> Iterator[Callable[[str, int], None]]:
    """A progress bar for each opener whose decision tree is walked; yields the callback
    `best_opener` reports settled games to."""
    with progress_bar("games", disable=not show) as bar:
        tasks: dict[str, TaskID] = {}

        def settled(opener: str, count: int) -> None:
            if opener not in tasks:
                for earlier in tasks.values():
                    bar.update(earlier, visible=False)
                tasks[opener] = bar.add_task(f"opener {opener.upper()}: walking its tree", total=games)
            bar.advance(tasks[opener], count)

        yield settled
