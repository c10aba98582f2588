"""The most informative guess without scoring every guess exactly.

A guess's feedback is the tiles of each of its distinct letters, and the tiles of a
letter L depend only on where L sits in the secret (a 5-bit mask). So the entropy of
the whole pattern is at most the sum, over the guess's distinct letters, of the
entropy of that letter's tiles (subadditivity), and those per-letter entropies come
from a 26 x 32 table counted once per position. Only the guesses whose bound reaches
the best exact score found are scored exactly: 1-5% of the 12,972 in a position with
a hundred candidates or more, where the full sweep cost most of `gen-sft`'s time.
Nothing is approximated: the maximum and every guess tied at it are exact.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from solver.entropy import row_score, score_guesses
from solver.words import WordLists

PRUNE_FROM = 8  # candidates; below this the full sweep is cheaper than the bound (gen-sft, 2 cores)
FIRST_PICKS = 4  # guesses with the highest bounds, scored first to set the bar
TOLERANCE = 1e-9  # bits: a bound this close to the bar still gets scored (float rounding)


@njit(cache=True)
def _letter_masks(codes: np.ndarray) -> np.ndarray:
    """(words, 26) uint8: bit i set where the word has that letter at position i."""
    masks = np.zeros((codes.shape[0], 26), dtype=np.uint8)
    for w in range(codes.shape[0]):
        for i in range(codes.shape[1]):
            masks[w, codes[w, i]] |= 1 << i
    return masks


@njit(cache=True)
def _letter_groups(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each guess's distinct letters (-1 pads) and the positions mask of each."""
    masks = _letter_masks(codes)
    letters = np.full((codes.shape[0], 5), -1, dtype=np.int8)
    spots = np.zeros((codes.shape[0], 5), dtype=np.uint8)
    for w in range(codes.shape[0]):
        k = 0
        for letter in range(26):
            if masks[w, letter]:
                letters[w, k] = letter
                spots[w, k] = masks[w, letter]
                k += 1
    return letters, spots


@njit(cache=True)
def _tile_keys() -> np.ndarray:
    """KEY[P, m]: which tiles a letter at positions P gets when the secret has it at
    positions m. Green where m meets P; of the other spots of P, the first
    min(the secret's other places for it, those spots) are yellow, left to right, the
    rest grey; so (m & P, yellows) names the tiles."""
    ones = np.zeros(32, dtype=np.int64)
    for m in range(32):
        for i in range(5):
            ones[m] += (m >> i) & 1
    keys = np.zeros((32, 32), dtype=np.int64)
    for spots in range(32):
        for m in range(32):
            green = m & spots
            keys[spots, m] = green * 8 + min(ones[m] - ones[green], ones[spots] - ones[green])
    return keys


@njit(cache=True)
def _letter_entropy_table(secret_masks: np.ndarray, columns: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """T[L, P]: entropy (bits) of the tiles at positions P of a guess that has letter L
    exactly there, over the secrets in `columns`."""
    n = columns.shape[0]
    counts = np.zeros((26, 32), dtype=np.int64)
    for c in range(n):
        masks = secret_masks[columns[c]]
        for letter in range(26):
            counts[letter, masks[letter]] += 1
    table = np.zeros((26, 32), dtype=np.float64)
    buckets = np.zeros(32 * 8, dtype=np.int64)
    seen = np.empty(32, dtype=np.int64)
    present = np.empty(32, dtype=np.int64)
    log_n = np.log2(n)
    for letter in range(26):
        n_present = 0
        for m in range(32):
            if counts[letter, m]:
                present[n_present] = m
                n_present += 1
        if n_present < 2:  # every secret has the letter in the same places: no information
            continue
        for spots in range(1, 32):
            n_seen = 0
            for i in range(n_present):
                b = keys[spots, present[i]]
                if buckets[b] == 0:
                    seen[n_seen] = b
                    n_seen += 1
                buckets[b] += counts[letter, present[i]]
            klogk = 0.0
            for i in range(n_seen):
                k = buckets[seen[i]]
                klogk += k * np.log2(k)
                buckets[seen[i]] = 0
            table[letter, spots] = log_n - klogk / n
    return table


@njit(cache=True)
def _bounds(table: np.ndarray, letters: np.ndarray, spots: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = np.empty(rows.shape[0], dtype=np.float64)
    for j in range(rows.shape[0]):
        g = rows[j]
        total = 0.0
        for k in range(5):
            if letters[g, k] < 0:
                break
            total += table[letters[g, k], spots[g, k]]
        out[j] = total
    return out


@njit(cache=True)
def _bar(matrix: np.ndarray, bounds: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> float:
    """The best exact entropy among the FIRST_PICKS rows with the highest bounds (found in
    one pass, no sort): a score the best guess reaches, to prune the rest against."""
    top = np.full(FIRST_PICKS, -1, dtype=np.int64)
    top_bounds = np.full(FIRST_PICKS, -1.0)
    floor = -1.0
    for j in range(bounds.shape[0]):
        if bounds[j] > floor:
            low = np.argmin(top_bounds)
            top_bounds[low] = bounds[j]
            top[low] = j
            floor = top_bounds.min()
    bar = 0.0
    for j in top:
        if j >= 0:
            bar = max(bar, row_score(matrix[rows[j]], columns)[0])
    return bar


class EntropyBound:
    """Per-letter entropy bounds for one word list's guesses against its secrets."""

    def __init__(self, guess_codes: np.ndarray, secret_codes: np.ndarray) -> None:
        self._letters, self._spots = _letter_groups(np.ascontiguousarray(guess_codes, dtype=np.uint8))
        self._secret_masks = _letter_masks(np.ascontiguousarray(secret_codes, dtype=np.uint8))
        self._keys = _tile_keys()

    @classmethod
    def for_lists(cls, lists: WordLists, secret_kind: str) -> "EntropyBound":
        """Bounds for guesses from `allowed` against the `secret_kind` list."""
        return cls(lists.allowed_codes, lists.answer_codes if secret_kind == "answers" else lists.allowed_codes)

    def bounds(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """An upper bound on the entropy of each guess row over the secrets in `columns`."""
        table = _letter_entropy_table(self._secret_masks, columns, self._keys)
        return _bounds(table, self._letters, self._spots, rows)

    def most_informative(self, matrix: np.ndarray, rows: np.ndarray, columns: np.ndarray
                         ) -> tuple[np.ndarray, float]:
        """The rows (in the order given) tied at the highest exact entropy over `columns`,
        and that entropy; the same as scoring every row, at a fraction of the work."""
        if columns.shape[0] < PRUNE_FROM:
            scored = np.arange(rows.shape[0])
        else:
            bounds = self.bounds(rows, columns)
            scored = np.flatnonzero(bounds >= _bar(matrix, bounds, rows, columns) - TOLERANCE)
        entropy, _ = score_guesses(matrix, rows[scored], columns)
        best = entropy.max()
        return rows[scored[entropy == best]], float(best)
