"""Proof that a guess finishes every game within the guesses left.

Entropy and expected guesses are averages: a guess that is best on average can
still send a family like _ILLS or _ATCH into a position with more secrets than
guesses. Near the end the question is small and exact instead: is there a line
of play that wins every candidate in time? This module answers it by a
depth-first AND-OR search (some guess such that every bucket it leaves finishes
in one guess fewer), stopping at the first line that works, so a position that
is safe costs a few groupings, not an optimisation.

The guesses tried at each position are the ones it could play in a real game: a
pool of strong splitters, then its own candidates (always legal, in hard mode
too), so "finishes" is a proof, and "does not" means only that no line exists
within the pool or that the search ran out of its work budget.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from solver.feedback import WIN
from solver.lookahead import group_by_pattern, hard_legal, tighten

WORK = 200_000  # guesses grouped before a search gives up: a failing search may not stall a game
GAVE_UP = -2  # what `finishing_guess` returns when the budget ran out first
NONE_FINISHES = -1


@njit(cache=True)
def _settled(k: int, after: int) -> int:
    """Whether k secrets finish with `after` guesses left from counting alone:
    1 yes, 0 no, -1 unknown. Guessing the candidates one by one wins k of them in k
    guesses (every miss removes at least the word guessed), and with one guess left
    only a single secret can be won."""
    if k <= after:
        return 1
    if after <= 1:
        return 0
    return -1


@njit(cache=True)
def _splits_apart(game, members, hard, greens, mins) -> bool:
    """Is there a guess (from the pool, then `members`) that gives every member its own
    pattern: the test for finishing with two guesses left."""
    matrix, codes, letter_counts, candidate_rows, pool = game
    n = members.shape[0]
    if n > 243:
        return False
    seen = np.zeros(243, dtype=np.bool_)
    for i in range(pool.shape[0] + n):
        if i < pool.shape[0]:
            row = pool[i]
            if hard and not hard_legal(codes, letter_counts, row, greens, mins):
                continue
        else:
            row = candidate_rows[members[i - pool.shape[0]]]
        patterns = matrix[row]
        apart = True
        for c in range(n):
            p = patterns[members[c]]
            if seen[p]:
                apart = False
                break
            seen[p] = True
        for c in range(n):
            seen[patterns[members[c]]] = False
        if apart:
            return True
    return False


@njit(cache=True)
def finishing_guess(game, first_rows, candidates, guesses_left, hard, greens, mins) -> int:
    """The first row of `first_rows` after which every candidate is won within
    `guesses_left` guesses (this one included), NONE_FINISHES if none is, or GAVE_UP.

    `game` is the tuple of `lookahead.lookahead_costs`; `first_rows` must be legal
    here. An explicit stack (numba cannot cache recursive functions): level l holds a
    position with `left[l]` guesses, the guess being tried there (its buckets grouped,
    `cursor` at the next bucket to prove) and `next_guess`, the next one to try.
    """
    matrix, codes, letter_counts, candidate_rows, pool = game
    levels, n_max = guesses_left, candidates.shape[0]
    cands = np.empty((levels, n_max), dtype=np.int64)
    members = np.empty((levels, n_max), dtype=np.int64)
    patterns = np.empty((levels, n_max), dtype=np.int64)
    size = np.zeros(levels, dtype=np.int64)
    left = np.zeros(levels, dtype=np.int64)
    green_at = np.empty((levels, 5), dtype=np.int8)
    min_count = np.empty((levels, 26), dtype=np.int8)
    next_guess = np.zeros(levels, dtype=np.int64)
    guess = np.zeros(levels, dtype=np.int64)
    cursor = np.zeros(levels, dtype=np.int64)

    size[0], left[0] = candidates.shape[0], guesses_left
    cands[0, :size[0]] = candidates
    green_at[0], min_count[0] = greens, mins
    work, lvl, need_guess = 0, 0, True
    while True:
        n = size[lvl]
        if need_guess:
            # The next guess at `lvl`: from `first_rows` at the root, else the pool, then the candidates.
            row = -1
            while row < 0:
                i = next_guess[lvl]
                stop = first_rows.shape[0] if lvl == 0 else pool.shape[0] + n
                if i >= stop:
                    break
                next_guess[lvl] += 1
                if lvl == 0:
                    row = first_rows[i]
                elif i >= pool.shape[0]:
                    row = candidate_rows[cands[lvl, i - pool.shape[0]]]
                elif not hard or hard_legal(codes, letter_counts, pool[i], green_at[lvl], min_count[lvl]):
                    row = pool[i]
            if row < 0:  # nothing finishes this position: the guess above it fails
                if lvl == 0:
                    return NONE_FINISHES
                lvl -= 1
                continue
            work += 1
            if work > WORK:
                return GAVE_UP
            guess[lvl], cursor[lvl] = row, 0
            group_by_pattern(matrix[row], cands[lvl, :n], members[lvl], patterns[lvl])
        # Prove the buckets of the guess at `lvl` one by one, opening a level for any that needs a search.
        need_guess, opened = False, False
        while cursor[lvl] < n:
            start = cursor[lvl]
            end = start + 1
            while end < n and patterns[lvl, end] == patterns[lvl, start]:
                end += 1
            cursor[lvl] = end
            pattern = patterns[lvl, start]
            if pattern == WIN:
                continue
            k, after = end - start, left[lvl] - 1
            verdict = _settled(k, after)
            if verdict < 0:
                sub_greens, sub_mins = green_at[lvl], min_count[lvl]
                if hard:
                    sub_greens, sub_mins = tighten(codes[guess[lvl]], pattern, sub_greens, sub_mins)
                if after == 2:
                    verdict = 1 if _splits_apart(game, members[lvl, start:end], hard, sub_greens, sub_mins) else 0
                else:
                    child = lvl + 1
                    size[child], left[child], next_guess[child] = k, after, 0
                    cands[child, :k] = members[lvl, start:end]
                    green_at[child], min_count[child] = sub_greens, sub_mins
                    opened = True
                    break
            if verdict == 0:
                need_guess = True
                break
        if opened:
            lvl += 1
            need_guess = True
        elif not need_guess:  # every bucket finishes: so does the position, and the bucket above it
            if lvl == 0:
                return guess[0]
            lvl -= 1
