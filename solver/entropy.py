"""Scoring guesses by how they split the remaining candidates.

For a guess, the candidates fall into buckets by feedback pattern. Its entropy (bits)
is what the feedback is expected to tell; its expected size is how many candidates
are expected to survive. Both come from one histogram per guess, computed in
parallel numba over matrix rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def score_guesses(matrix: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entropy in bits and expected candidates left for each guess row over `columns`."""
    n_rows, n = rows.shape[0], columns.shape[0]
    entropy = np.empty(n_rows, dtype=np.float64)
    expected = np.empty(n_rows, dtype=np.float64)
    log_n = np.log2(n) if n > 0 else 0.0
    for r in prange(n_rows):
        counts = np.zeros(243, dtype=np.int32)
        row = matrix[rows[r]]
        for c in range(n):
            counts[row[columns[c]]] += 1
        sum_clogc = 0.0
        sum_sq = 0.0
        for b in range(243):
            k = counts[b]
            if k > 1:
                sum_clogc += k * np.log2(k)
            sum_sq += k * k
        entropy[r] = log_n - sum_clogc / n if n > 0 else 0.0
        expected[r] = sum_sq / n if n > 0 else 0.0
    return entropy, expected


@njit(cache=True)
def bucket_sizes(row: np.ndarray, columns: np.ndarray) -> np.ndarray:
    counts = np.zeros(243, dtype=np.int64)
    for c in range(columns.shape[0]):
        counts[row[columns[c]]] += 1
    return counts


def guess_score(matrix: np.ndarray, row: int, candidates: np.ndarray) -> tuple[float, float]:
    """(entropy bits, expected candidates left) of one guess row over `candidates`."""
    entropy, expected = score_guesses(matrix, np.array([row], dtype=np.int64), candidates)
    return float(entropy[0]), float(expected[0])
