"""Lookahead: expected guesses to finish, searched a few moves deep, aware of the limit.

Greedy entropy maximises what one guess tells. The lookahead instead scores each
shortlisted guess by the expected number of guesses to finish: it splits the
candidates by feedback, plays the best follow-up in every bucket (from a pool of
strong splitters plus the bucket's own candidates), and so on `depth` moves down,
where `finish_estimate` takes over. Losing a game costs `FAIL_PENALTY` guesses, so
the search trades a little speed for never running out of guesses.

Two things keep it honest near the limit. With two guesses left the value is exact
(within the pool) at any depth: the last guess wins one secret per bucket, so the
search counts buckets instead of guessing; that is what spots families like _ILLS
or _OUND before they are entered with too few guesses. And in hard mode every
follow-up is checked against the hints its own line of play has revealed (greens in
place, revealed letters reused), so the search never counts on an illegal guess.

Pruning: a bucket of k secrets costs at least (2k - 1) / k (one can be hit at once,
the rest need two), so a guess is abandoned as soon as the buckets scored so far
plus that bound for the rest cannot beat the best guess already found.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from solver.feedback import WIN

FAIL_PENALTY = 1e6  # guesses charged per secret the search expects to lose: losses come first
LOSS_LINE = 6.0  # no position costs more than six guesses without a loss; one loss adds > 70
RISK_PENALTY = 20.0  # the same, for a loss that is only estimated (hard mode, far from the end)
NO_GREEN = -1


@njit(cache=True)
def finish_estimate(n: int, guesses_left: int, hard: bool) -> float:
    """Expected guesses for n candidates with at least three guesses left, where the
    search stops: a fit of the greedy solver's finishing costs, plus in hard mode the
    risk that a family like _IGHT eats one guess per member (every guess must keep
    the family's shared letters, so each one tests a single member)."""
    if n == 1:
        return 1.0
    expected = 1.5 if n == 2 else 1.0 + 0.62 * np.log2(n) ** 0.9
    if hard:
        return expected + RISK_PENALTY * max(0.0, (n - guesses_left) / n)
    return expected


@njit(cache=True)
def hard_legal(codes, letter_counts, row, greens, mins) -> bool:
    """Hard-mode rule for one guess: greens kept in place, revealed letters reused."""
    for pos in range(5):
        if greens[pos] != NO_GREEN and codes[row, pos] != greens[pos]:
            return False
    for letter in range(26):
        if letter_counts[row, letter] < mins[letter]:
            return False
    return True


@njit(cache=True)
def tighten(guess, pattern, greens, mins):
    """Hard-mode hints after `guess` got `pattern`: new greens and minimum letter counts."""
    new_greens = greens.copy()
    new_mins = mins.copy()
    shown = np.zeros(26, dtype=np.int8)
    code = pattern
    for pos in range(4, -1, -1):
        tile = code % 3
        code //= 3
        if tile == 2:
            new_greens[pos] = guess[pos]
        if tile != 0:
            shown[guess[pos]] += 1
    for letter in range(26):
        if shown[letter] > new_mins[letter]:
            new_mins[letter] = shown[letter]
    return new_greens, new_mins


@njit(cache=True)
def _formula_cost(k: int, guesses_left: int) -> float:
    """Cost of k candidates when it follows from counting alone, else -1."""
    if guesses_left <= 0:
        return FAIL_PENALTY
    if k == 1:
        return 1.0
    if guesses_left == 1:
        return 1.0 + (k - 1) / k * FAIL_PENALTY
    if k == 2:
        return 1.5
    return -1.0


@njit(cache=True)
def two_left_cost(game, candidates, hard, greens, mins, cutoff) -> float:
    """Exact cost of `candidates` with two guesses left (best guess from candidates, then pool).

    The last guess wins one secret per bucket, so a guess that leaves b buckets,
    w of them the win, costs 2 - w/n + FAIL_PENALTY * (n - b) / n: only bucket counts
    matter, which makes this a fast scan with no sorting.
    """
    matrix, codes, letter_counts, candidate_rows, pool = game
    n = candidates.shape[0]
    perfect = (2.0 * n - 1.0) / n
    if cutoff <= perfect:
        return perfect
    seen = np.zeros(243, dtype=np.bool_)
    best = np.inf
    for i in range(n + pool.shape[0]):
        if i < n:
            row = candidate_rows[candidates[i]]
        elif not hard or hard_legal(codes, letter_counts, pool[i - n], greens, mins):
            row = pool[i - n]
        else:
            continue
        patterns = matrix[row]
        buckets, wins = 0, 0
        for c in range(n):
            p = patterns[candidates[c]]
            if not seen[p]:
                seen[p] = True
                buckets += 1
                if p == WIN:
                    wins = 1
        for c in range(n):
            seen[patterns[candidates[c]]] = False
        cost = 2.0 - wins / n + FAIL_PENALTY * (n - buckets) / n
        if cost < best:
            best = cost
            if best <= perfect + 1e-12:
                break
    return best


@njit(cache=True)
def group_by_pattern(matrix_row, candidates, members, patterns) -> None:
    """Sort `candidates` by the pattern `matrix_row` gives them, into `members` and `patterns`."""
    n = candidates.shape[0]
    for c in range(n):
        patterns[c] = matrix_row[candidates[c]]
    order = np.argsort(patterns[:n], kind="mergesort")
    for c in range(n):
        members[c] = candidates[order[c]]
    patterns[:n] = patterns[:n][order]


@njit(cache=True)
def _open_guess(matrix_row, candidates, members, patterns) -> float:
    """Group `candidates` by the pattern `matrix_row` gives them (into `members` and
    `patterns`, sorted by pattern) and return the least the guess can cost: itself,
    plus (2k - 1) / n for every bucket of k that is not the win."""
    n = candidates.shape[0]
    group_by_pattern(matrix_row, candidates, members, patterns)
    bound = 1.0
    for c in range(n):
        if patterns[c] != WIN:
            bound += 2.0 / n
            if c == 0 or patterns[c] != patterns[c - 1]:
                bound -= 1.0 / n
    return bound


@njit(cache=True)
def guess_cost(game, root_row, candidates, guesses_left, depth, hard, greens, mins, root_cutoff) -> float:
    """Expected guesses to finish if `root_row` is played now (this guess included),
    or a value >= `root_cutoff` as soon as it is clear it cannot beat that.

    A depth-first search with an explicit stack (numba cannot cache recursive
    functions): level l holds one position (its candidates, the best guess value
    found so far, `limit`, the value it must beat to matter above) and the guess
    being scored there (its buckets, `cursor` to the next one, `bound` so far, and
    `cutoff`, past which it is abandoned). Level 0 is the root guess itself.
    """
    matrix, codes, letter_counts, candidate_rows, pool = game
    levels, n_max = depth + 1, candidates.shape[0]
    cands = np.empty((levels, n_max), dtype=np.int64)
    members = np.empty((levels, n_max), dtype=np.int64)
    patterns = np.empty((levels, n_max), dtype=np.int64)
    size = np.zeros(levels, dtype=np.int64)
    left = np.zeros(levels, dtype=np.int64)
    deep = np.zeros(levels, dtype=np.int64)
    green_at = np.empty((levels, 5), dtype=np.int8)
    min_count = np.empty((levels, 26), dtype=np.int8)
    limit = np.full(levels, np.inf)
    best = np.full(levels, np.inf)
    next_guess = np.zeros(levels, dtype=np.int64)
    guess = np.zeros(levels, dtype=np.int64)
    bound = np.zeros(levels)
    cutoff = np.full(levels, np.inf)
    cursor = np.zeros(levels, dtype=np.int64)

    n = n_max
    size[0], left[0], deep[0], guess[0] = n, guesses_left, depth, root_row
    cands[0, :n] = candidates
    green_at[0], min_count[0] = greens, mins
    bound[0] = _open_guess(matrix[root_row], cands[0, :n], members[0], patterns[0])
    cutoff[0] = root_cutoff
    lvl = 0
    while True:
        # Score the buckets of the guess at `lvl` until one needs a search of its own.
        n = size[lvl]
        opened = False
        while cursor[lvl] < n and bound[lvl] < cutoff[lvl]:
            start = cursor[lvl]
            pattern = patterns[lvl, start]
            end = start + 1
            while end < n and patterns[lvl, end] == pattern:
                end += 1
            cursor[lvl] = end
            if pattern == WIN:
                continue
            k = end - start
            known = _formula_cost(k, left[lvl] - 1)
            if known < 0.0 and hard and (left[lvl] == 3 or deep[lvl] > 1):
                green_at[lvl + 1], min_count[lvl + 1] = tighten(codes[guess[lvl]], pattern,
                                                                 green_at[lvl], min_count[lvl])
            if known < 0.0 and left[lvl] == 3:
                known = two_left_cost(game, members[lvl, start:end], hard, green_at[lvl + 1], min_count[lvl + 1],
                                      (cutoff[lvl] - bound[lvl]) * n / k + (2.0 * k - 1.0) / k)
            elif known < 0.0 and deep[lvl] <= 1:
                known = finish_estimate(k, left[lvl] - 1, hard)
            if known >= 0.0:
                bound[lvl] += k / n * (known - (2.0 * k - 1.0) / k)
                continue
            child = lvl + 1
            size[child], left[child], deep[child] = k, left[lvl] - 1, deep[lvl] - 1
            cands[child, :k] = members[lvl, start:end]
            limit[child] = (cutoff[lvl] - bound[lvl]) * n / k + (2.0 * k - 1.0) / k
            best[child] = np.inf
            next_guess[child] = 0
            lvl = child
            opened = True
            break
        if not opened:
            if lvl == 0:
                return bound[0]
            best[lvl] = min(best[lvl], bound[lvl])
        # Pick the next guess for the position at `lvl`: its candidates, then the pool.
        n = size[lvl]
        row = -1
        if best[lvl] > (2.0 * n - 1.0) / n + 1e-12:  # else nothing can beat what was found
            while next_guess[lvl] < n + pool.shape[0] and row < 0:
                i = next_guess[lvl]
                next_guess[lvl] += 1
                if i < n:
                    row = candidate_rows[cands[lvl, i]]
                elif not hard or hard_legal(codes, letter_counts, pool[i - n], green_at[lvl], min_count[lvl]):
                    row = pool[i - n]
        if row >= 0:
            guess[lvl], cursor[lvl] = row, 0
            cutoff[lvl] = min(best[lvl], limit[lvl])
            bound[lvl] = _open_guess(matrix[row], cands[lvl, :n], members[lvl], patterns[lvl])
            continue
        # The position is settled: its value replaces its floor in the guess above.
        value, k = best[lvl], n
        lvl -= 1
        bound[lvl] += k / size[lvl] * (value - (2.0 * k - 1.0) / k)


@njit(cache=True)
def distinct_splits(matrix, ranked, candidates, wanted) -> np.ndarray:
    """Positions in `ranked` of the first `wanted` guess rows that split `candidates`
    differently (other groups, or another one of them the win).

    Small positions have thousands of guesses but few distinct splits; keeping the
    best-ranked guess of each lets a pool of a few hundred cover all of them. Large
    positions stop after little more than `wanted` rows.
    """
    n = candidates.shape[0]
    seen = {np.uint64(0)}  # typed by its first element; no split hashes to 0 in practice
    keep = np.empty(min(wanted, ranked.shape[0]), dtype=np.int64)
    kept = 0
    label = np.full(243, -1, dtype=np.int64)
    for r in range(ranked.shape[0]):
        patterns = matrix[ranked[r]]
        label[WIN] = 0
        used = 1
        h = np.uint64(1469598103934665603)
        for c in range(n):
            p = patterns[candidates[c]]
            if label[p] < 0:
                label[p] = used
                used += 1
            h = (h ^ np.uint64(label[p])) * np.uint64(1099511628211)
        for c in range(n):
            label[patterns[candidates[c]]] = -1
        if h not in seen:
            seen.add(h)
            keep[kept] = r
            kept += 1
            if kept == keep.shape[0]:
                break
    return keep[:kept]


@njit(parallel=True, cache=True)
def lookahead_costs(game, shortlist, candidates, guesses_left, depth, hard, greens, mins, cutoff) -> np.ndarray:
    """Expected guesses to finish (this one included) for each shortlisted guess row;
    any value >= `cutoff` only says the guess is no better than that.

    `game` is the tuple (pattern matrix, letter codes of the allowed words, their
    letter counts, row in `allowed` of each secret column, pool of follow-up rows).

    `depth` counts the guesses searched, this one included; below that
    `finish_estimate` scores what is left (exactly, with two guesses to go).
    """
    costs = np.empty(shortlist.shape[0], dtype=np.float64)
    for s in prange(shortlist.shape[0]):
        costs[s] = guess_cost(game, shortlist[s], candidates, guesses_left, depth, hard, greens, mins, cutoff)
    return costs
