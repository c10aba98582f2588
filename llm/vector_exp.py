"""Attention and SwiGLU on a CPU with an `exp` that runs many lanes at once.

The mlx wheel for Linux is built for any x86-64 (no FMA, no AVX), so its `exp` runs one lane at a
time and calls libm's `fmaf` at every step: in a `perf` profile of a head-state pass a third of the
samples were that `exp`, in the attention's softmax and the SwiGLU's sigmoid (results/passes/).
Written in MLX arithmetic instead (take out the multiple n of ln 2 nearest, a degree-6 polynomial
for the rest, put n into the float's exponent bits), it compiles to plain float code that runs
four lanes at once, and is more accurate (1.6e-7 relative against mlx's 4e-6).

How it is compiled decides its speed as much as what it computes: one loop over the array for
the whole chain (compiled for each shape, in Estrin's form so that it is 11 operations deep, the
most mlx fuses), and no `maximum` or `where` inside it (their branches keep the compiler from
running that loop on several lanes): the clamp runs before, as mlx's own operation.

`vector_exp(model)` runs the model's attention and SwiGLU that way while inside, on a CPU, for
float32 activations, and `mx.logsumexp` too (mlx-lm's generator normalises every step's logits
over the 49,152-token vocabulary with it: 11.4 ms of a 16-row decode step, 3.2 this way);
anything else (a GPU, half precision, attention sinks, a quantized cache) runs mlx's and
mlx-lm's own functions. The results agree with mlx's to float32 rounding, not bit for bit.

The attention's weights 88 or more below a row's largest (every masked one) are exactly 0: as
e^-87 their products with the values were subnormal numbers, which x86 CPUs compute ~10x slower.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache, partial

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import activations, base

from llm import decode_attention

_LOG2E = 1.4426950408889634
_LN2_HIGH, _LN2_LOW = 0.693359375, -2.12194440e-4  # ln 2 in two parts, so x - n ln 2 keeps its low bits
_BIASED = 1.5 * 2**23 + 127  # adding it rounds a float to the nearest integer n and leaves n + 127
#                              (2^n's exponent bits) in the float's low bits
_POLYNOMIAL = (1.0, 1.0, 0.49999991059303284, 0.1666642129421234, 0.0416683591902256, 0.008374771103262901,
               0.0013829420786350965)  # exp(r) on |r| <= ln 2 / 2, least squares on the relative error: 1.8e-8
_LOWEST, _HIGHEST = -88.0, 88.0  # e^-88 rounds to n = -127, whose exponent bits are 0: exactly 0


@lru_cache(maxsize=64)
def _compiled(body: Callable, *shapes: tuple[int, ...]) -> Callable:
    """`body` compiled for inputs of these shapes, a function of its own for each.

    A compile for one shape fuses a chain of up to 11 operations into one loop; a shapeless one
    broadcasts every operand, and its loops hold 3-5 operations (each a pass over the array).
    mlx looks a compiled function's shapes up one by one (27 us a call after 3,000 shapes), so each
    shape gets a function of its own and the least recently used are let go with their graphs."""
    return mx.compile(partial(body))


def _exp_parts_of(x: mx.array) -> tuple[mx.array, mx.array]:
    """exp(x) = exp(r) * 2^n for x in [-88, 88]: exp(r) and n + 127 + 1.5 * 2^23, whose float bits
    end in n + 127 (so shifting them 23 places up leaves 2^n's bits). The polynomial in Estrin's
    form, so that the whole chain is 11 operations deep and compiles to one loop."""
    biased = x * _LOG2E + _BIASED
    n = biased - _BIASED
    r = (x - n * _LN2_HIGH) - n * _LN2_LOW
    r2 = r * r
    c = _POLYNOMIAL
    low = (c[0] + c[1] * r) + r2 * (c[2] + c[3] * r)
    return low + (r2 * r2) * ((c[4] + c[5] * r) + r2 * c[6]), biased


def _exp_parts(x: mx.array) -> tuple[mx.array, mx.array]:
    return _compiled(_exp_parts_of, x.shape)(x)


def _joined(exp_r: mx.array, biased: mx.array) -> mx.array:
    """exp(r) * 2^n; kept out of the compiled part, where mlx cannot reinterpret bits."""
    return exp_r * mx.view(mx.left_shift(mx.view(biased, mx.uint32), 23), mx.float32)


@mx.custom_function
def _exp_in_range(x: mx.array) -> mx.array:
    return _joined(*_exp_parts(x))


@_exp_in_range.vjp
def _exp_in_range_vjp(primals, cotangent: mx.array, output: mx.array) -> mx.array:
    return cotangent * output  # d/dx e^x = e^x; the bits above have no gradient of their own


def exp(x: mx.array) -> mx.array:
    """e^x of a float32 array, with its gradient: e^88's 1.7e38 above, 0 at e^-88 and below (and
    subnormal from e^-87.7 to e^-87.3, where float32 itself turns subnormal)."""
    return _exp_in_range(mx.clip(x, _LOWEST, _HIGHEST))


@mx.custom_function
def _softmax_numerators(scores: mx.array, most: mx.array) -> mx.array:
    """exp(scores - most), exactly 0 where that is e^-88 or less (every masked score among them):
    e^-87 times a value is a subnormal number, over which an x86 CPU's matmuls run ~10x slower
    (the values' matmul of a head-state context 241 -> 25 ms, results/passes/). Beside a row's
    largest weight of 1, dropping such weights changes no float32 sum."""
    return _joined(*_exp_parts(mx.maximum(scores - most, _LOWEST)))


@_softmax_numerators.vjp
def _softmax_numerators_vjp(primals, cotangent: mx.array, output: mx.array) -> tuple[mx.array, mx.array]:
    along = cotangent * output
    return along, -along.sum(-1, keepdims=True)


def _silu_times_of(gate: mx.array, exp_minus_gate: mx.array, x: mx.array) -> mx.array:
    return gate / (1.0 + exp_minus_gate) * x


@lru_cache(maxsize=64)
def _causal_mask(queries: int, keys: int) -> mx.array:
    """0 where query i (the last `queries` of `keys` positions) may see key j, -inf where not."""
    seen = (mx.arange(queries)[:, None] + (keys - queries)) >= mx.arange(keys)[None]
    return mx.where(seen, 0.0, -mx.inf)


def attention(queries: mx.array, keys: mx.array, values: mx.array, cache, scale: float, mask,
              sinks: mx.array | None = None) -> mx.array:
    """mlx-lm's `scaled_dot_product_attention` with a softmax of `exp` above (grouped-query heads,
    masks as mlx's: "causal", a boolean array to keep, or one to add); a decode step's, one query a
    row over mlx-lm's batch cache, in llm/decode_attention.py's one kernel."""
    if queries.dtype != mx.float32 or sinks is not None or hasattr(cache, "bits"):
        return base.scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks)
    if decode_attention.fits(queries, cache, mask):
        out = decode_attention.attend(queries, cache, scale, mask)
        if out is not None:
            return out
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
    return _compiled(_silu_times_of, gate.shape, x.shape)(gate, exp(-gate), x)


_MLX_LOGSUMEXP = mx.logsumexp


def logsumexp(a: mx.array, axis: int | list[int] | None = None, keepdims: bool = False, *, stream=None) -> mx.array:
    """mlx's `logsumexp` with `exp` above, on a CPU for float32 (mlx's own elsewhere): the same
    value to float32 rounding, -inf for a row of -inf as mlx gives."""
    if a.dtype != mx.float32 or stream is not None or mx.default_device().type != mx.cpu:
        return _MLX_LOGSUMEXP(a, axis=axis, keepdims=keepdims, stream=stream)
    most = mx.stop_gradient(a.max(axis, keepdims=True))  # any shift leaves the sum as it is
    most = mx.where(most == -mx.inf, 0.0, most)  # a row of -inf: exp(-inf - 0) = 0, log 0 = -inf
    out = mx.log(exp(a - most).sum(axis, keepdims=True)) + most
    return out if keepdims else (out.reshape(()) if axis is None else out.squeeze(axis))


def categorical(logits: mx.array, key: mx.array) -> mx.array:
    """One token drawn from one row of logits (1, vocabulary) with `key`: mlx's own draw for one
    row (the inverse of the cumulative weights at a uniform number, mlx's `random.cpp`) with the
    exp above, on a CPU for float32; mlx's `categorical` elsewhere. A 32-row decode step's draws
    took 33 ms with mlx's one-lane exp over the 49,152-token vocabulary, 13 ms with this one
    (results/passes/); the token is mlx's but where the two exps' rounding moves a boundary of
    the cumulative weights across the uniform number."""
    if logits.dtype != mx.float32 or logits.shape[0] != 1 or mx.default_device().type != mx.cpu:
        return mx.random.categorical(logits, key=key)
    weights = exp(logits - logits.max(-1, keepdims=True))
    below = mx.cumsum(weights, axis=-1, inclusive=False)
    chosen = mx.random.uniform(shape=(1,), key=key) * weights.sum(-1)
    count = (below <= chosen[:, None]).sum(-1)  # at least 1 (below starts at 0) but for NaN logits
    return (mx.maximum(count, 1) - 1).astype(mx.uint32)  # a token id either way, as mlx's draw gives


_OURS = {"scaled_dot_product_attention": (base.scaled_dot_product_attention, attention),
         "swiglu": (activations.swiglu, swiglu)}
_OURS_IN_MLX = {"logsumexp": (_MLX_LOGSUMEXP, logsumexp)}


@contextmanager
def vector_exp(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Run `model`'s attention and SwiGLU, and `mx.logsumexp`, with `exp` above while inside, on a
    CPU (unless not `enabled`, which benchmarks compare with).

    mlx-lm's model files call the functions they imported from mlx-lm by name, so those names are
    pointed at this module's in every model file `model` is built from, and back on the way out;
    mlx-lm's generator and mlx's losses call `mx.logsumexp`, so mlx's own name is pointed too."""
    if not enabled or mx.default_device().type != mx.cpu:
        yield
        return
    files = {sys.modules[type(layer).__module__] for layer in model.modules()}
    targets = [(file, _OURS) for file in files] + [(mx, _OURS_IN_MLX)]
    swapped = [(file, name, theirs, ours) for file, table in targets for name, (theirs, ours) in table.items()
               if getattr(file, name, None) is theirs]
    for file, name, _, ours in swapped:
        setattr(file, name, ours)
    try:
        yield
    finally:
        for file, name, theirs, _ in swapped:
            setattr(file, name, theirs)
