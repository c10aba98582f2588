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
"""

from __future__ import annotations

import mlx.core as mx
import numba
import numpy as np
from mlx_lm.models.cache import BatchKVCache

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
    _attend(np.ascontiguousarray(np.asarray(queries).reshape(rows, heads, dims)), keys, values, seen, keep,
            np.float32(scale), out)
    return mx.array(out).reshape(rows, heads, 1, dims)


@numba.njit(parallel=True, fastmath=True, cache=True)
def _attend(queries: np.ndarray, keys: np.ndarray, values: np.ndarray, seen: int, keep: np.ndarray,
            scale: np.float32, out: np.ndarray) -> None:
    """`out[r, h]` = softmax(scale q k^T over the kept keys) v for row r's query head h, whose key and
    value head is h // (heads / key heads). One job a row and key head: its query heads' scores
    are computed while its keys pass through the core once, and so are their sums of values."""
    rows, heads, dims = queries.shape
    kv_heads = keys.shape[1]
    per_kv = heads // kv_heads
    for job in numba.prange(rows * kv_heads):
        row, kv = job // kv_heads, job % kv_heads
        first = kv * per_kv
        query = queries[row, first:first + per_kv] * scale
        scores = np.zeros((per_kv, seen), np.float32)
        for j in range(seen):
            if keep[row, j]:
                for h in range(per_kv):
                    total = np.float32(0.0)
                    for d in range(dims):
                        total += query[h, d] * keys[row, kv, j, d]
                    scores[h, j] = total
        for h in range(per_kv):
            most = np.float32(-np.inf)
            for j in range(seen):
                if keep[row, j] and scores[h, j] > most:
                    most = scores[h, j]
            total = np.float32(0.0)
            for j in range(seen):
                shifted = scores[h, j] - most
                weight = np.exp(max(shifted, _FLOOR)) if keep[row, j] and shifted >= _FLOOR else np.float32(0.0)
                scores[h, j] = weight
                total += weight
            scores[h] *= np.float32(1.0) / total
        mixed = np.zeros((per_kv, dims), np.float32)
        for j in range(seen):
            if keep[row, j]:
                for h in range(per_kv):
                    weight = scores[h, j]
                    for d in range(dims):
                        mixed[h, d] += weight * values[row, kv, j, d]
        out[row, first:first + per_kv] = mixed
