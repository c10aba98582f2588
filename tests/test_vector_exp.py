"""llm/vector_exp.py: exp, attention and SwiGLU agree with mlx's own to float32 rounding, and a
model runs them only while inside `vector_exp`."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models import activations, base, llama

from llm import vector_exp
from llm.loading import load_model
from llm_fixtures import tiny_model_dir  # noqa: F401


def test_exp_is_as_close_to_the_true_exp_as_float32_allows_over_its_whole_range():
    x = np.concatenate([np.linspace(-87, 88, 200_001), [0.0, -1e-8, 1e-8, np.log(2), -np.log(2)]]).astype(np.float32)
    ours = np.array(vector_exp.exp(mx.array(x)), dtype=np.float64)
    true = np.exp(x.astype(np.float64))
    assert np.max(np.abs(ours - true) / true) < 2e-7  # mlx's own: 4e-6
    assert np.array(vector_exp.exp(mx.array([-mx.inf, -200.0, -88.0, 88.0, 200.0]))).tolist() == pytest.approx(
        [0.0, 0.0, 0.0, np.exp(88.0), np.exp(88.0)], rel=1e-6)


def test_exp_compiled_for_each_shape_gives_the_same_values_in_any_shape():
    values = np.linspace(-20, 20, 84, dtype=np.float32)
    flat = np.array(vector_exp.exp(mx.array(values)))
    for shape in ((7, 12), (2, 3, 14), (84, 1)):
        assert np.array_equal(np.array(vector_exp.exp(mx.array(values.reshape(shape)))).ravel(), flat)


@pytest.mark.parametrize("heads, kv_heads, length, seen", [(4, 2, 7, 7), (9, 3, 5, 12), (2, 2, 1, 9)])
def test_attention_is_mlx_attention_for_each_kind_of_mask(heads, kv_heads, length, seen):
    rng = np.random.default_rng(0)
    queries, keys, values = (mx.array(rng.normal(size=(2, h, n, 16)).astype(np.float32) * 2)
                             for h, n in ((heads, length), (kv_heads, seen), (kv_heads, seen)))
    keep = mx.array(rng.random((2, 1, length, seen)) < 0.7) | (mx.arange(seen) == seen - 1)
    added = mx.where(keep, 0.0, -1e9) + mx.array(rng.normal(size=(length, seen)).astype(np.float32))
    for mask in (None, "causal", keep, added):
        theirs = mx.fast.scaled_dot_product_attention(queries, keys, values, scale=0.25, mask=mask)
        ours = vector_exp.attention(queries, keys, values, None, 0.25, mask)
        assert ours.shape == theirs.shape
        assert np.allclose(np.array(ours), np.array(theirs), rtol=1e-5, atol=1e-5), mask


def test_attention_weights_of_masked_and_far_lower_scores_are_zero_never_subnormal():
    """A weight of e^-87 times a value is a subnormal number, and matmuls over those run ~10x slower
    on an x86 CPU (results/passes/): such weights are exactly 0 instead."""
    scores = mx.array([[0.0, -10.0, -87.0, -88.0, -100.0, -mx.inf]])
    weights = np.array(vector_exp._softmax_numerators(scores, mx.zeros((1, 1))))[0]
    assert weights[:3] == pytest.approx(np.exp([0.0, -10.0, -87.0]), rel=1e-6)
    assert weights[3:].tolist() == [0.0, 0.0, 0.0]
    queries, keys, values = (mx.array(np.random.default_rng(3).normal(size=(1, 2, n, 8)).astype(np.float32))
                             for n in (40, 64, 64))
    scores = (queries * 0.5) @ keys.swapaxes(-1, -2) + vector_exp._causal_mask(40, 64)
    weights = np.array(vector_exp._softmax_numerators(scores, scores.max(-1, keepdims=True)))
    assert np.all((weights == 0) | (weights >= np.finfo(np.float32).tiny)) and (weights == 0).sum() == 2 * 40 * 39 / 2


def test_swiglu_is_mlx_lms_and_half_precision_runs_mlx_lms_own():
    rng = np.random.default_rng(1)
    gate, x = (mx.array(rng.normal(size=(3, 50)).astype(np.float32) * 40) for _ in range(2))
    assert np.allclose(np.array(vector_exp.swiglu(gate, x)), np.array(activations.swiglu(gate, x)),
                       rtol=1e-5, atol=1e-5)
    half = gate.astype(mx.bfloat16), x.astype(mx.bfloat16)
    assert mx.array_equal(vector_exp.swiglu(*half), activations.swiglu(*half))


def test_a_model_runs_them_only_inside_and_its_logits_agree(tiny_model_dir):  # noqa: F811
    model, _ = load_model(str(tiny_model_dir))
    tokens = mx.array([[1, 5, 9, 40, 7, 3, 22, 11]])
    plain = np.array(model(tokens))
    with vector_exp.vector_exp(model):
        assert llama.scaled_dot_product_attention is vector_exp.attention and llama.swiglu is vector_exp.swiglu
        inside = np.array(model(tokens))
    assert llama.scaled_dot_product_attention is base.scaled_dot_product_attention
    assert llama.swiglu is activations.swiglu
    assert np.allclose(inside, plain, rtol=1e-5, atol=1e-4) and not np.array_equal(inside, plain)
    with vector_exp.vector_exp(model, enabled=False):
        assert llama.swiglu is activations.swiglu and mx.logsumexp is vector_exp._MLX_LOGSUMEXP


def test_logsumexp_is_mlxs_for_any_axes_and_mlx_lms_generator_calls_it_inside(tiny_model_dir):  # noqa: F811
    scores = mx.random.normal((4, 7, 300), key=mx.random.key(6)) * 30
    scores = mx.where(mx.arange(300) % 5 == 0, -mx.inf, scores)
    for axis in (None, -1, 0, [0, 2]):
        for keepdims in (False, True):
            ours, theirs = vector_exp.logsumexp(scores, axis, keepdims), mx.logsumexp(scores, axis, keepdims)
            assert ours.shape == theirs.shape
            assert np.allclose(np.array(ours), np.array(theirs), rtol=1e-6, atol=1e-5)
    fenced = mx.array([[-mx.inf] * 3, [1.0, 2.0, 3.0]])  # a row every token of which is banned
    assert np.array(vector_exp.logsumexp(fenced, -1))[0] == -np.inf
    half = scores.astype(mx.bfloat16)
    assert mx.array_equal(vector_exp.logsumexp(half, -1), mx.logsumexp(half, -1))
    model, _ = load_model(str(tiny_model_dir))
    with vector_exp.vector_exp(model):
        assert mx.logsumexp is vector_exp.logsumexp
        with vector_exp.vector_exp(model):  # nested: the inner exit leaves the outer's in place
            pass
        assert mx.logsumexp is vector_exp.logsumexp
    assert mx.logsumexp is vector_exp._MLX_LOGSUMEXP


def test_gradients_through_attention_and_swiglu_are_mlxs():
    rng = np.random.default_rng(2)
    queries, keys, values = (mx.array(rng.normal(size=(1, h, n, 8)).astype(np.float32))
                             for h, n in ((4, 6), (2, 6), (2, 6)))
    gate, x = (mx.array(rng.normal(size=(6, 12)).astype(np.float32) * 3) for _ in range(2))

    def loss(attend, glu):
        def value(q, k, v, g, u):
            return (attend(q, k, v, "causal") ** 2).sum() + (glu(g, u) * u).sum()
        return mx.grad(value, argnums=(0, 1, 2, 3, 4))(queries, keys, values, gate, x)

    ours = loss(lambda q, k, v, m: vector_exp.attention(q, k, v, None, 0.3, m), vector_exp.swiglu)
    theirs = loss(lambda q, k, v, m: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.3, mask=m),
                  activations.swiglu)
    for a, b in zip(ours, theirs):
        assert np.allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-5)


def test_categorical_draws_mlxs_tokens_for_the_same_keys():
    logits = mx.random.normal((40, 500), key=mx.random.key(4)) * 3
    logits = mx.where(mx.arange(500) % 7 == 0, -mx.inf, logits)  # top-p's cut tokens are -inf
    keys = mx.random.split(mx.random.key(5), 40)
    ours = [vector_exp.categorical(logits[i:i + 1], keys[i]).item() for i in range(40)]
    theirs = [mx.random.categorical(logits[i:i + 1], key=keys[i]).item() for i in range(40)]
    assert ours == theirs and all(token % 7 for token in ours) and len(set(ours)) > 30
    nan = mx.full((1, 500), mx.nan)  # a diverged model's logits: still a token id, never past the vocabulary
    assert 0 <= vector_exp.categorical(nan, keys[0]).item() < 500
