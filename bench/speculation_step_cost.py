"""What a decode step costs when each row runs q tokens at once (its last token and q - 1 drafted
ones, as a speculative step verifies them), against one token a row: the bundled SFT start folded
in, llm/vector_exp.py's passes (the fused one-query attention at q = 1, mlx's attention above),
mlx-lm's batch cache of `rows` rows after `context` tokens, one row left-padded by 4 (a boolean
mask, as eval's batches have), the logits normalised as mlx-lm's generator does. The cache is
trimmed back after each step, so every step sees `context` tokens; the q values take turns, 20
rounds after 2 warm-ups, and each q's median is reported (one run's steps varied by up to 1.6x).

    python -m bench.speculation_step_cost 16 260 OUT.json
"""

from llm.blas import ensure_fast_blas

ensure_fast_blas()

import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import mlx.core as mx  # noqa: E402
from mlx_lm.models.cache import BatchKVCache  # noqa: E402

from bench.decode import cpu_name  # noqa: E402
from llm.loading import load_model  # noqa: E402
from llm.vector_exp import vector_exp  # noqa: E402

QUERIES = (1, 2, 3, 5, 9)


def main(rows: int, context: int, out_path: str) -> None:
    model, _ = load_model("default", adapter="llm/sft_start", fuse=True)
    times = {queries: [] for queries in QUERIES}
    with vector_exp(model, True):
        cache = [BatchKVCache([4] + [0] * (rows - 1)) for _ in model.layers]
        model(mx.ones((rows, context), dtype=mx.int32), cache=cache)
        mx.eval([c.state for c in cache])
        for round_number in range(22):
            for queries in QUERIES:
                began = time.perf_counter()
                logits = model(mx.ones((rows, queries), dtype=mx.int32), cache=cache)
                mx.eval(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
                if round_number >= 2:
                    times[queries].append(time.perf_counter() - began)
                for layer in cache:
                    layer.trim(queries)
    one = statistics.median(times[1])
    results = [{"queries_a_row": q, "step_ms": round(1000 * statistics.median(t), 1),
                "over_one": round(statistics.median(t) / one, 3),
                "quartiles_ms": [round(1000 * v, 1) for v in statistics.quantiles(t, n=4)]} for q, t in times.items()]
    for row in results:
        print(row, flush=True)
    json.dump({"cpu": cpu_name(), "rows": rows, "context": context, "steps": results}, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
