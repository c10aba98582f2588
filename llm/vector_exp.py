"""Attention and SwiGLU on a CPU with an `exp` that runs many lanes at once.

The mlx wheel for Linux is built for any x86-64 (no FMA, no AVX), so its `exp` runs one lane at a
time and calls libm's `fmaf` at every step: in a `perf` profile of a head-state pass a third of the
samples were that `exp`, in the attention's softmax and the SwiGLU's sigmoid (results/passes/).
Written in MLX arithmetic instead (Cephes' `expf`: a degree-5 polynomial after taking out the
multiple of ln 2 nearest, that multiple put into the float's exponent bits), it compiles to plain
float code: 4x faster on a softmax's scores and more accurate (8e-8 relative against mlx's 4e-6).

`vector_exp(model)` runs the model's attention and SwiGLU that way while inside, on a CPU, for
float32 activations; anything else (a GPU, half precision, attention sinks, a quantized cache)
runs mlx-lm's own functions. The results agree with mlx's to float32 rounding, not bit for bit.

The attention's weights 87 or more below a row's largest (every masked one) are exactly 0: as
e^-87 their products with the values were subnormal numbers, which x86 CPUs compute ~10x slower.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache, partial

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import activations, base

_LOG2E = 1.4426950408889634
_LN2_HIGH, _LN2_LOW = 0.693359375, -2.12194440e-4  # ln 2 in two parts, so x - n ln 2 keeps its low bits
_ROUND = 12582912.0  # 1.5 * 2^23: adding and taking it away again rounds a float to the nearest integer
_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
               5.0000001201e-1)  # Cephes' expf, exp(r) = 1 + r + r^2 * p(r) on |r| <= ln 2 / 2
_LOWEST, _HIGHEST = -87.0, 88.0  # exp's float32 range: 2^n must stay a normal number


@partial(mx.compile, shapeless=True)
def _exp_parts(x: mx.array) -> tuple[mx.array, mx.array]:
    """exp(x) = exp(r) * 2^n for x in [-87, 88]: exp(r) and n + 127 + `_ROUND`, whose float bits are
    the bits of `_ROUND` plus n + 127 (so shifting them 23 places up leaves 2^n's bits)."""
    n = (x * _LOG2E + _ROUND) - _ROUND
    r = x - n * _LN2_HIGH - n * _LN2_LOW
    p = _POLYNOMIAL[0]
    for c in _POLYNOMIAL[1:]:
        p = p * r + c
    return p * (r * r) + r + 1.0, n + (_ROUND + 127.0)


def _joined(exp_r: mx.array, biased: mx.array) -> mx.array:
    """exp(r) * 2^n; kept out of the compiled part, where mlx cannot reinterpret bits shapelessly."""
    return exp_r * mx.view(mx.left_shift(mx.view(biased, mx.uint32), 23), mx.float32)


@mx.custom_function
def _exp_in_range(x: mx.array) -> mx.array:
    return _joined(*_exp_parts(x))


@_exp_in_range.vjp
def _exp_in_range_vjp(primals, cotangent: mx.array, output: mx.array) -> mx.array:
    return cotangent * output  # d/dx e^x = e^x; the bits above have no gradient of their own


def exp(x: mx.array) -> mx.array:
    """e^x of a float32 array (e^-87's 1.6e-38 below, e^88's 1.7e38 above), with its gradient."""
    return _exp_in_range(mx.clip(x, _LOWEST, _HIGHEST))


@partial(mx.compile, shapeless=True)
def _softmax_parts(scores: mx.array, most: mx.array) -> tuple[mx.array, mx.array]:
    """`_exp_parts` of scores less their row's largest, with exp(r) zero wherever that difference
    is -87 or less (every masked score among them): e^-87 times a value is a subnormal number,
    over which an x86 CPU's matmuls run ~10x slower (the values' matmul of a head-state context
    241 -> 25 ms, results/passes/). Beside a row's largest weight of 1, dropping e^-87 changes
    no float32 sum."""
    shifted = scores - most
    exp_r, biased = _exp_parts(mx.maximum(shifted, _LOWEST))
    return exp_r * (shifted > _LOWEST), biased


@mx.custom_function
def _softmax_numerators(scores: mx.array, most: mx.array) -> mx.array:
    """exp(scores - most), exactly 0 where that is e^-87 or less (`_softmax_parts`)."""
    return _joined(*_softmax_parts(scores, most))


@_softmax_numerators.vjp
def _softmax_numerators_vjp(primals, cotangent: mx.array, output: mx.array) -> tuple[mx.array, mx.array]:
    along = cotangent * output
    return along, -along.sum(-1, keepdims=True)


@partial(mx.compile, shapeless=True)
def _silu_times(gate: mx.array, exp_minus_gate: mx.array, x: mx.array) -> mx.array:
    return gate / (1.0 + exp_minus_gate) * x


@lru_cache(maxsize=64)
def _causal_mask(queries: int, keys: int) -> mx.array:
    """0 where query i (the last `queries` of `keys` positions) may see key j, -inf where not."""
    seen = (mx.arange(queries)[:, None] + (keys - queries)) >= mx.arange(keys)[None]
    return mx.where(seen, 0.0, -mx.inf)


def attention(queries: mx.array, keys: mx.array, values: mx.array, cache, scale: float, mask,
              sinks: mx.array | None = None) -> mx.array:
    """mlx-lm's `scaled_dot_product_attention` with a softmax of `exp` above (grouped-query heads,
    masks as mlx's: "causal", a boolean array to keep, or one to add)."""
    if queries.dtype != mx.float32 or sinks is not None or hasattr(cache, "bits"):
        return base.scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks)
    batch, heads, length, _ = queries.shape
    kv_heads, seen = keys.shape[1], keys.shape[2]
    grouped = (queries * scale).reshape(batch, kv_heads, heads // kv_heads, length, -1)
    scores = grouped @ keys[:, :, None].swapaxes(-1, -2)
    if isinstance(mask, str):
        scores = scores + _causal_mask(length, seen)
    elif mask is not None:
        mask = mx.expand_dims(mask, -3) if mask.ndim == 4 else mask
        scores = mx.where(mask, scores, -mx.inf) if mask.dtype == mx.bool_ else scores + mask
    most = mx.stop_gradient(scores.max(-1, keepdims=True))  # any shift leaves the softmax as it is
    weights = _softmax_numerators(scores, most)
    out = (weights @ values[:, :, None]) / weights.sum(-1, keepdims=True)
    return out.reshape(batch, heads, length, -1)


def swiglu(gate: mx.array, x: mx.array) -> mx.array:
    """mlx-lm's `swiglu`, silu(gate) * x, its sigmoid of `exp` above."""
    if gate.dtype != mx.float32:
        return activations.swiglu(gate, x)
    return _silu_times(gate, exp(-gate), x)


_OURS = {"scaled_dot_product_attention": (base.scaled_dot_product_attention, attention),
         "swiglu": (activations.swiglu, swiglu)}


@contextmanager
def vector_exp(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Run `model`'s attention and SwiGLU with `exp` above while inside, on a CPU (unless not
    `enabled`, which benchmarks compare with).

    mlx-lm's model files call the functions they imported from mlx-lm by name, so those names are
    pointed at this module's in every model file `model` is built from, and back on the way out."""
    if not enabled or mx.default_device().type != mx.cpu:
        yield
        return
    files = {sys.modules[type(layer).__module__] for layer in model.modules()}
    swapped = [(file, name, theirs) for file in files for name, (theirs, _) in _OURS.items()
               if getattr(file, name, None) is theirs]
    for file, name, _ in swapped:
        setattr(file, name, _OURS[name][1])
    try:
        yield
    finally:
        for file, name, theirs in swapped:
            setattr(file, name, theirs)
