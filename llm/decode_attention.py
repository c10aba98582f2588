"""A decode step's attention on a CPU: each row's one new query over its batch cache, in one kernel.

Through mlx a decode step's attention is a chain of about ten operations a layer (the queries'
product with the cached keys, the mask, the softmax's largest score, exp, sum and division, the
product with the values), each a dispatch and a pass over the scores: 33 ms of a 16-row step
after 260 cached tokens on the 2-core Xeon, of which the two products that read the cache are 16.
Fused into one numba kernel, a row's scores stay in the core's cache and the keys and values are
read once: 16 ms (21 in a step, with each layer's evaluation and handover), the outputs within
4e-6 of mlx's, and the same 32 eval games (eval 1.10x, results/passes/).

It serves mlx-lm's `BatchKVCache` (the batch generator's cache) with one query a row and a
boolean mask (the rows' left padding), in float32 on a CPU; `fits` says when, and
llm/vector_exp.py's `attention` runs mlx's operations otherwise (prefill, training's passes, a GPU).

`RowMapBatchKVCache`, the batch cache llm/vector_exp.py has mlx-lm make on a CPU, lets a finished
answer's row go without copying the cache: mlx-lm's `filter` copies every layer's keys and values
(all rows, all positions) at every step where an answer ends, 55 ms at 16 rows and 100 at 32 on
2 cores, while this kernel reads each row where it lies.
"""

from __future__ import annotations

import mlx.core as mx
import numba
import numpy as np
from mlx_lm.models.cache import BatchKVCache, KVCache


class RowMapBatchKVCache(BatchKVCache):
    """mlx-lm's `BatchKVCache` whose `filter` keeps the buffers as they are: `rows` names each
    row's row in them (None: row i is row i), and the rows let go stay until the next copy, when
    the buffers grow by mlx-lm's 256 positions or another batch joins. A new position is written
    to each row where it lies; mlx's operations (`keys_and_values`) see the rows gathered."""

    rows: np.ndarray | None = None

    def filter(self, batch_indices) -> None:
        if self.keys is None:
            return super().filter(batch_indices)
        kept = np.asarray(batch_indices, np.int64)
        self.rows = (np.arange(self.keys.shape[0]) if self.rows is None else self.rows)[kept]
        self.offset = self.offset[mx.array(kept)]
        self.left_padding = self.left_padding[mx.array(kept)]

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if self.rows is not None and self._idx + keys.shape[2] > self.keys.shape[2]:
            self.gather()
        if self.rows is None:
            return super().update_and_fetch(keys, values)
        prev, rows = self._idx, mx.array(self.rows)
        self._idx += keys.shape[2]
        self.offset = self.offset + keys.shape[2]
        self.keys[rows, :, prev:self._idx, :] = keys
        self.values[rows, :, prev:self._idx, :] = values
        return self.keys_and_values()

    def keys_and_values(self) -> tuple[mx.array, mx.array]:
        if self.rows is None:
            return super().keys_and_values()
        rows = mx.array(self.rows)
        return self.keys[rows, :, :self._idx, :], self.values[rows, :, :self._idx, :]

    def gather(self) -> None:
        """Copy the rows kept into buffers of their own (what mlx-lm's `filter` does at once)."""
        if self.rows is not None:
            rows, self.rows = mx.array(self.rows), None
            self.keys, self.values = self.keys[rows], self.values[rows]

    def extend(self, other: BatchKVCache) -> None:
        self.gather()
        if isinstance(other, RowMapBatchKVCache):
            other.gather()
        super().extend(other)

    def extract(self, idx: int) -> KVCache:
        """Row `idx`'s cache on its own (mlx-lm's generator makes one, lazily, of every finished answer)."""
        if self.rows is None:
            return super().extract(idx)
        row, padding = int(self.rows[idx]), self.left_padding[idx].item()
        cache = KVCache()
        cache.keys = mx.contiguous(self.keys[row:row + 1, :, padding:self._idx])
        cache.values = mx.contiguous(self.values[row:row + 1, :, padding:self._idx])
        cache.offset = cache.keys.shape[2]
        return cache

    def prepare(self, **kwargs) -> None:
        self.gather()
        super().prepare(**kwargs)

    def finalize(self) -> None:
        self.gather()
        super().finalize()

    @property
    def state(self):
        self.gather()
        return super().state

    @state.setter
    def state(self, v) -> None:
        self.rows = None
        BatchKVCache.state.fset(self, v)

_FLOOR = np.float32(-87.0)  # weights below e^-87 are 0: e^-88 is subnormal, and x86 multiplies those ~10x slower


def fits(queries: mx.array, cache, mask) -> bool:
    """True when `attend` computes this attention: one float32 query a row on a CPU over a batch
    cache whose values are as wide as the queries and whose key heads divide the query heads, its
    mask none or boolean."""
    return (queries.shape[2] == 1 and queries.dtype == mx.float32 and isinstance(cache, BatchKVCache)
            and cache.keys is not None and cache.keys.dtype == cache.values.dtype == mx.float32
            and cache.values.shape[-1] == queries.shape[-1] and queries.shape[1] % cache.keys.shape[1] == 0
            and (mask is None or (isinstance(mask, mx.array) and mask.dtype == mx.bool_))
            and mx.default_device().type == mx.cpu)


def attend(queries: mx.array, cache: BatchKVCache, scale: float, mask: mx.array | None) -> mx.array | None:
    """Attention of `queries` (rows, heads, 1, dims) over the first `cache._idx` keys and values of
    `cache` (grouped-query heads), keys where `mask` (rows or 1, 1, 1, keys) is False left out: the
    output (rows, heads, 1, dims), or None when the cache's buffers are not laid out row after row
    (a trimmed batch's, until its next write copies them).

    The queries, keys and values are evaluated here, so the step's graph ends at each layer's
    attention; numba reads mlx's buffers in place."""
    mx.eval(queries, cache.keys, cache.values, mask)
    keys, values = np.asarray(cache.keys), np.asarray(cache.values)
    if not (keys.flags.c_contiguous and values.flags.c_contiguous):
        return None
    rows, heads, _, dims = queries.shape
    seen = cache._idx
    keep = np.ones((rows, seen), np.bool_) if mask is None else np.asarray(mask)
    keep = np.broadcast_to(keep, (rows, 1, 1, seen)).reshape(rows, seen) if keep.ndim == 4 else keep
    out = np.empty((rows, heads, dims), np.float32)
    where = getattr(cache, "rows", None)
    where = np.arange(rows) if where is None else where
    _attend(np.ascontiguousarray(np.asarray(queries).reshape(rows, heads, dims)), keys, values, where, seen, keep,
            np.float32(scale), out)
    return mx.array(out).reshape(rows, heads, 1, dims)


@numba.njit(parallel=True, fastmath=True, cache=True)
def _attend(queries: np.ndarray, keys: np.ndarray, values: np.ndarray, where: np.ndarray, seen: int,
            keep: np.ndarray, scale: np.float32, out: np.ndarray) -> None:
    """`out[r, h]` = softmax(scale q k^T over the kept keys) v for row r's query head h, whose keys
    and values are row `where[r]`'s head h // (heads / key heads). One job a row and key head: its
    query heads' scores are computed while its keys pass through the core once, and so are their
    sums of values."""
    rows, heads, dims = queries.shape
    kv_heads = keys.shape[1]
    per_kv = heads // kv_heads
    for job in numba.prange(rows * kv_heads):
        row, kv = job // kv_heads, job % kv_heads
        lies = where[row]
        first = kv * per_kv
        query = queries[row, first:first + per_kv] * scale
        scores = np.zeros((per_kv, seen), np.float32)
        for j in range(seen):
            if keep[row, j]:
                for h in range(per_kv):
                    total = np.float32(0.0)
                    for d in range(dims):
                        total += query[h, d] * keys[lies, kv, j, d]
                    scores[h, j] = total
        for h in range(per_kv):
            most = np.float32(-np.inf)
            for j in range(seen):
                if keep[row, j] and scores[h, j] > most:
                    most = scores[h, j]
            total = np.float32(0.0)
            for j in range(seen):
                shifted = scores[h, j] - most
                weight = np.exp(shifted) if keep[row, j] and shifted >= _FLOOR else np.float32(0.0)
                scores[h, j] = weight
                total += weight
            scores[h] *= np.float32(1.0) / total
        mixed = np.zeros((per_kv, dims), np.float32)
        for j in range(seen):
            if keep[row, j]:
                for h in range(per_kv):
                    weight = scores[h, j]
                    for d in range(dims):
                        mixed[h, d] += weight * values[lies, kv, j, d]
        out[row, first:first + per_kv] = mixed
