"""Pattern matrices: feedback of every guess against every secret, cached on disk.

Row g, column s holds the pattern code of allowed[g] against secret s. Every solver
decision is a histogram over one row's candidate columns, so the matrix is computed
once per pair of lists, in parallel numba, and loaded from the cache afterwards.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from common.cache_files import load_array, save_array
from common.fileio import cache_dir
from solver.feedback import feedback_code
from solver.words import WordLists


@njit(parallel=True, cache=True)
def build_pattern_matrix(guesses: np.ndarray, secrets: np.ndarray) -> np.ndarray:
    n_guess, n_secret = guesses.shape[0], secrets.shape[0]
    out = np.empty((n_guess, n_secret), dtype=np.uint8)
    for g in prange(n_guess):
        unmatched = np.zeros(26, dtype=np.int8)
        guess = guesses[g]
        for s in range(n_secret):
            out[g, s] = feedback_code(guess, secrets[s], unmatched)
    return out


MATRIX_FORMAT = 2  # part of every matrix cache's inputs: bump when the encoding of patterns changes


def matrix_path(lists: WordLists, secrets: str) -> str:
    return str(cache_dir() / f"patterns-{lists.fingerprint}-{secrets}.npz")


def pattern_matrix(lists: WordLists, secrets: str = "answers") -> np.ndarray:
    """(len(allowed), len(secrets)) uint8 matrix; built and cached on first use.

    The cache file carries a digest of the word lists and of its bytes: a damaged or
    foreign one (empty, another dtype, the right shape with other numbers) is rebuilt.
    """
    path = matrix_path(lists, secrets)
    inputs = f"patterns v{MATRIX_FORMAT} {lists.fingerprint} {secrets}"
    shape = (len(lists.allowed), len(lists.secrets(secrets)))
    matrix = load_array(path, inputs, shape, np.dtype(np.uint8))
    if matrix is None:
        secret_codes = lists.answer_codes if secrets == "answers" else lists.allowed_codes
        matrix = build_pattern_matrix(lists.allowed_codes, secret_codes)
        save_array(path, matrix, inputs)
    return matrix
