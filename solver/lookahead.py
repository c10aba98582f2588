"""Depth-2 lookahead: expected guesses to finish, two moves deep, aware of the limit.

Greedy entropy maximises what one guess tells. The lookahead instead estimates, for
each shortlisted guess, the expected number of guesses to finish: it splits the
candidates, plays the best follow-up in every bucket (from a pool of strong
splitters plus the bucket's own candidates), and scores each set left after that
with `finish_estimate`. Sets that cannot be finished in the guesses left add a large
penalty, which is what keeps hard mode out of traps like _IGHT and lets the last
guesses maximise the chance of winning rather than information.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

WIN = 242
FAIL_PENALTY = 20.0
TWO_GUESS_REACH = 8  # sets up to this size are usually split into singletons by one guess


@njit(cache=True)
def finish_estimate(n: int, guesses_left: int, hard: bool) -> float:
    """Expected guesses to solve n candidates (counting the winning one), plus a
    penalty times the estimated chance of running out of guesses."""
    if n <= 0:
        return 0.0
    if guesses_left <= 0:
        return FAIL_PENALTY
    if n == 1:
        return 1.0
    expected = 1.5 if n == 2 else 1.0 + 0.62 * np.log2(n) ** 0.9
    if guesses_left == 1:
        fail = (n - 1) / n
    elif hard:
        fail = max(0.0, (n - guesses_left) / n)
    elif guesses_left == 2:
        fail = max(0.0, (n - TWO_GUESS_REACH) / n)
    else:
        fail = 0.0
    return expected + FAIL_PENALTY * fail


@njit(cache=True)
def _second_step(matrix, guess_row, bucket, guesses_left, hard) -> float:
    """Expected guesses for `bucket` when `guess_row` is played next."""
    n = bucket.shape[0]
    counts = np.zeros(243, dtype=np.int64)
    row = matrix[guess_row]
    for c in range(n):
        counts[row[bucket[c]]] += 1
    total = 1.0
    for b in range(243):
        k = counts[b]
        if k > 0 and b != WIN:
            total += k / n * finish_estimate(k, guesses_left - 1, hard)
    return total


@njit(cache=True)
def _bucket_cost(matrix, bucket, pool, cand_rows, guesses_left, hard) -> float:
    """Best follow-up cost for one bucket with `guesses_left` guesses to go."""
    n = bucket.shape[0]
    if guesses_left <= 0:
        return FAIL_PENALTY
    if n == 1:
        return 1.0
    best = 1e18
    for i in range(pool.shape[0]):
        cost = _second_step(matrix, pool[i], bucket, guesses_left, hard)
        if cost < best:
            best = cost
    for c in range(n):
        cost = _second_step(matrix, cand_rows[bucket[c]], bucket, guesses_left, hard)
        if cost < best:
            best = cost
    return best


@njit(parallel=True, cache=True)
def lookahead_costs(matrix, shortlist, candidates, pool, cand_rows, guesses_left, hard) -> np.ndarray:
    """Expected guesses to finish (this one included) for each shortlisted guess row.

    In hard mode pass an empty `pool`: follow-ups are then the bucket's own
    candidates, which are always legal.
    """
    n = candidates.shape[0]
    costs = np.empty(shortlist.shape[0], dtype=np.float64)
    for s in prange(shortlist.shape[0]):
        row = matrix[shortlist[s]]
        patterns = np.empty(n, dtype=np.int64)
        for c in range(n):
            patterns[c] = row[candidates[c]]
        order = np.argsort(patterns, kind="mergesort")
        total = 1.0
        start = 0
        while start < n:
            p = patterns[order[start]]
            end = start
            while end < n and patterns[order[end]] == p:
                end += 1
            if p != WIN:
                bucket = candidates[order[start:end]]
                total += (end - start) / n * _bucket_cost(matrix, bucket, pool, cand_rows, guesses_left - 1, hard)
            start = end
        costs[s] = total
    return costs
