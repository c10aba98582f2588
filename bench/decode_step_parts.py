"""Where an eval decode step's time goes, part by part, and what MKL could do with its weight products.

An eval step as the product runs it (the bundled SFT start folded into the weights, llm/vector_exp.py's
attention and SwiGLU, mlx-lm's batch cache) for `rows` rows after `context` cached tokens, each part
evaluated on its own (so the parts add up to a little more than a step): the seconds a step spends in
each kind of operation over the 30 layers, then the two vocabulary-wide operations mlx-lm's generator
and the answers' samplers add (the log-softmax over 49,152 tokens, one draw a row).

Then the step's largest weight product shape (the gate and up projections, 1536 x 576, 60 a step) at
1-80 rows three ways: through mlx (`x @ W.T`, which calls MKL's `cblas_sgemm`), MKL's `cblas_sgemm`
called directly, and MKL's packed-B `cblas_sgemm_compute` (the weights packed once, as a decode loop
could keep them), with the largest difference between mlx's product and the packed one.

    python -m bench.decode_step_parts 16 260 decode-step-parts-cpu.json
"""

from llm.blas import ensure_fast_blas

ensure_fast_blas()  # before mlx loads

import ctypes  # noqa: E402
import json
import os
import statistics
import sys
import time
from collections import defaultdict

import mlx.core as mx
import numpy as np
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import BatchKVCache

from bench.decode import cpu_name
from llm.blas import find_mkl
from llm.loading import load_model
from llm.vector_exp import attention, categorical, swiglu, vector_exp

ROW_MAJOR, NO_TRANS, TRANS, B_MATRIX, PACKED = 101, 111, 112, 162, 151
FLOAT_P = ctypes.POINTER(ctypes.c_float)


def median_ms(run, repeats: int = 20) -> float:
    run()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return round(statistics.median(times) * 1e3, 3)


def step_parts(model, rows: int, context: int, steps: int = 10) -> dict[str, float]:
    """Milliseconds a decode step spends in each part (the mean over `steps` steps)."""
    spent: dict[str, float] = defaultdict(float)

    def timed(name, make):
        began = time.perf_counter()
        out = make()
        mx.eval(out)
        spent[name] += time.perf_counter() - began
        return out

    cache = [BatchKVCache([0] * rows) for _ in model.layers]
    prompt = mx.array(np.random.default_rng(0).integers(100, 40000, (rows, context)))
    for first in range(0, context, 64):
        model(prompt[:, first:first + 64], cache=cache)
        mx.eval([c.keys for c in cache])
    inner = model.model
    for step in range(steps + 2):
        if step == 2:
            spent.clear()
        h = timed("embedding", lambda: inner.embed_tokens(mx.full((rows, 1), 1000 + step)))
        mask = timed("mask", lambda: create_attention_mask(h, cache[0]))
        for layer, layer_cache in zip(inner.layers, cache):
            a, mlp = layer.self_attn, layer.mlp
            x = timed("norms", lambda: layer.input_layernorm(h))
            q, k, v = timed("q, k, v products", lambda: (a.q_proj(x), a.k_proj(x), a.v_proj(x)))
            q = q.reshape(rows, 1, a.n_heads, -1).transpose(0, 2, 1, 3)
            k = k.reshape(rows, 1, a.n_kv_heads, -1).transpose(0, 2, 1, 3)
            v = v.reshape(rows, 1, a.n_kv_heads, -1).transpose(0, 2, 1, 3)
            q, k = timed("rope", lambda: (a.rope(q, offset=layer_cache.offset), a.rope(k, offset=layer_cache.offset)))
            k, v = timed("cache write", lambda: layer_cache.update_and_fetch(k, v))
            o = timed("attention", lambda: attention(q, k, v, layer_cache, a.scale, mask))
            o = timed("o product", lambda: a.o_proj(o.transpose(0, 2, 1, 3).reshape(rows, 1, -1)))
            h = timed("residual adds", lambda: h + o)
            x = timed("norms", lambda: layer.post_attention_layernorm(h))
            g, u = timed("gate, up products", lambda: (mlp.gate_proj(x), mlp.up_proj(x)))
            s = timed("swiglu", lambda: swiglu(g, u))
            d = timed("down product", lambda: mlp.down_proj(s))
            h = timed("residual adds", lambda: h + d)
        h = timed("norms", lambda: inner.norm(h))
        timed("output layer", lambda: inner.embed_tokens.as_linear(h))
    parts = {name: round(seconds / steps * 1e3, 3) for name, seconds in spent.items()}
    logits = mx.random.normal((rows, 49152))
    keys = mx.random.split(mx.random.key(0), rows)
    mx.eval(logits, keys)
    parts["log-softmax over the vocabulary (mlx-lm's generator)"] = median_ms(
        lambda: mx.eval(logits - mx.logsumexp(logits, axis=-1, keepdims=True)))
    parts["one draw a row (the answers' samplers)"] = median_ms(
        lambda: mx.eval([categorical(logits[r:r + 1] / 0.7, keys[r]) for r in range(rows)]))
    return dict(sorted(parts.items(), key=lambda item: -item[1]))


def products(counts: tuple[int, ...], n: int = 1536, k: int = 576, maps: int = 60) -> list[dict]:
    """Milliseconds for `maps` products of (m x k) by a (n x k) weight's transpose, three ways."""
    mkl = ctypes.CDLL(str(find_mkl()))
    mkl.cblas_sgemm_pack_get_size.restype = ctypes.c_size_t
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((n, k), dtype=np.float32) for _ in range(maps)]
    mlx_weights = [mx.array(w) for w in weights]
    mx.eval(mlx_weights)
    size = mkl.cblas_sgemm_pack_get_size(B_MATRIX, max(counts), n, k)
    packed = []
    for w in weights:
        buffer = np.zeros(size // 4 + 16, np.float32)
        mkl.cblas_sgemm_pack(ROW_MAJOR, B_MATRIX, TRANS, max(counts), n, k, ctypes.c_float(1.0),
                             w.ctypes.data_as(FLOAT_P), k, buffer.ctypes.data_as(FLOAT_P))
        packed.append(buffer)
    rows = []
    for m in counts:
        x = rng.standard_normal((m, k), dtype=np.float32)
        out = np.zeros((m, n), np.float32)
        x_mlx = mx.array(x)
        mx.eval(x_mlx)

        def plain():
            for w in weights:
                mkl.cblas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, m, n, k, ctypes.c_float(1.0), x.ctypes.data_as(FLOAT_P),
                                k, w.ctypes.data_as(FLOAT_P), k, ctypes.c_float(0.0), out.ctypes.data_as(FLOAT_P), n)

        def compute():
            for b in packed:
                mkl.cblas_sgemm_compute(ROW_MAJOR, NO_TRANS, PACKED, m, n, k, x.ctypes.data_as(FLOAT_P), k,
                                        b.ctypes.data_as(FLOAT_P), k, ctypes.c_float(0.0),
                                        out.ctypes.data_as(FLOAT_P), n)

        through_mlx = median_ms(lambda: mx.eval([x_mlx @ w.T for w in mlx_weights]))
        direct, packed_ms = median_ms(plain), median_ms(compute)
        difference = float(np.abs(out - np.array(x_mlx @ mlx_weights[-1].T)).max())
        rows.append({"rows": m, "mlx_ms": through_mlx, "mkl_sgemm_ms": direct, "mkl_packed_ms": packed_ms,
                     "mlx_gb_per_s": round(maps * n * k * 4 / through_mlx / 1e6, 1),
                     "packed_over_mlx": round(through_mlx / packed_ms, 2), "packed_largest_difference": difference})
    return rows


def main() -> None:
    rows, context, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    model, _ = load_model("default", "llm/sft_start", fuse=True)
    with vector_exp(model):
        parts = step_parts(model, rows, context)
    report = {"cpu": cpu_name(), "cores": os.cpu_count(), "rows": rows, "context": context,
              "step_parts_ms": parts, "step_parts_total_ms": round(sum(parts.values()), 1),
              "weight_products_ms": round(sum(v for name, v in parts.items() if "product" in name
                                              or name == "output layer"), 1),
              "gate_up_shape_products": products((1, 4, 8, 16, 32, 64, 80))}
    print(json.dumps(report, indent=1))
    with open(out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
