"""A decode step's fused attention over mlx-lm's batch cache is mlx's attention to float32 rounding."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import BatchKVCache, KVCache

from llm import decode_attention, vector_exp


def _step(left_padding: list[int], seen: int, heads: int = 6, kv_heads: int = 2, dims: int = 16, seed: int = 0):
    """A batch cache after `seen` tokens and one decode step's write: the queries, the cache and
    the step's mask (made before the write, as mlx-lm's models do)."""
    rng = np.random.default_rng(seed)
    rows = len(left_padding)

    def normal(*shape):
        return mx.array(rng.normal(size=shape).astype(np.float32) * 2)

    cache = BatchKVCache(left_padding)
    cache.update_and_fetch(normal(rows, kv_heads, seen, dims), normal(rows, kv_heads, seen, dims))
    mask = cache.make_mask(1)
    cache.update_and_fetch(normal(rows, kv_heads, 1, dims), normal(rows, kv_heads, 1, dims))
    return normal(rows, heads, 1, dims), cache, mask


def _mlx(queries, cache, scale, mask):
    keys, values = cache.keys_and_values()
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask)


@pytest.mark.slow  # 21 s on 2 cores
def test_it_is_mlx_attention_for_left_padded_rows_and_grouped_heads():
    for heads, kv_heads in ((6, 2), (4, 4), (9, 3)):
        queries, cache, mask = _step([0, 3, 7, 1], 11, heads, kv_heads)
        assert decode_attention.fits(queries, cache, mask)
        ours = decode_attention.attend(queries, cache, 0.25, mask)
        assert ours.shape == queries.shape
        assert np.allclose(np.array(ours), np.array(_mlx(queries, cache, 0.25, mask)), rtol=1e-5, atol=1e-6)
    queries, cache, _ = _step([0, 0], 5, seed=4)  # no padding: every key seen, with or without a mask
    every = mx.ones((1, 1, 1, 6), dtype=mx.bool_)
    assert np.allclose(np.array(decode_attention.attend(queries, cache, 0.25, None)),
                       np.array(_mlx(queries, cache, 0.25, None)), rtol=1e-5, atol=1e-6)
    assert np.array_equal(np.array(decode_attention.attend(queries, cache, 0.25, every)),
                          np.array(decode_attention.attend(queries, cache, 0.25, None)))


def test_vector_exp_attention_runs_it_for_a_decode_step_and_mlx_operations_otherwise():
    queries, cache, mask = _step([2, 0], 300, seed=1)
    keys, values = cache.keys_and_values()
    assert np.array_equal(np.array(vector_exp.attention(queries, keys, values, cache, 0.3, mask)),
                          np.array(decode_attention.attend(queries, cache, 0.3, mask)))
    prefill = mx.concatenate([queries, queries], axis=2)
    plain = KVCache()
    plain.update_and_fetch(keys, values)
    assert not decode_attention.fits(prefill, cache, mask)
    assert not decode_attention.fits(queries, plain, None)
    assert not decode_attention.fits(queries.astype(mx.bfloat16), cache, mask)
    assert not decode_attention.fits(queries, cache, mx.where(mask, 0.0, -mx.inf))


def test_left_out_keys_and_far_lower_scores_weigh_exactly_nothing():
    queries, cache, mask = _step([4, 0, 2], 9, heads=2, kv_heads=2, seed=2)
    keys, values = np.array(cache.keys), np.array(cache.values)
    keys[1, :, 3] = -np.array(queries[1, :, 0]) * 1e3  # row 1's key 3 scores far below the rest

    def attended(values: np.ndarray) -> np.ndarray:
        cache.keys, cache.values = mx.array(keys), mx.array(values)
        return np.array(decode_attention.attend(queries, cache, 0.5, mask))

    before = attended(values)
    keys[0, :, :4], values[0, :, :4] = 1e4, np.nan  # row 0's padding, never read into its output
    values[1, :, 3] = 1e30
    after = attended(values)
    assert np.isfinite(after).all() and np.array_equal(after, before)


def test_a_trimmed_batchs_cache_is_left_to_mlx_until_its_next_write():
    queries, cache, mask = _step([5, 3], 8, seed=3)
    cache.keys, cache.values = cache.keys[..., 2:, :], cache.values[..., 2:, :]  # as mlx-lm's filter trims
    cache._idx -= 2
    assert decode_attention.attend(queries, cache, 0.5, mask[..., 2:]) is None
    keys, values = cache.keys_and_values()
    out = vector_exp.attention(queries, keys, values, cache, 0.5, mask[..., 2:])
    assert np.allclose(np.array(out), np.array(_mlx(queries, cache, 0.5, mask[..., 2:])), rtol=1e-5, atol=1e-6)
