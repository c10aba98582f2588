"""`doctor`: what this machine gives MLX, in one table.

Training speed on a CPU hinges on facts a user can't see from MLX itself: which BLAS
its matmuls reach (the Linux wheel's own is ~50x slower than MKL) and what an fp32
matmul actually runs at. This reports them, with the default model's cache state.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Any

from rich.table import Table

from llm.blas import OPT_OUT, blas_in_use, find_mkl


def matmul_gflops(n: int = 1024, runs: int = 5) -> float:
    """Median fp32 n x n matmul speed in GFLOP/s on MLX's default device."""
    import mlx.core as mx

    a = mx.random.normal((n, n))
    b = mx.random.normal((n, n))
    mx.eval(a @ b)  # warm-up: first call pays for allocation and thread start
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        mx.eval(a @ b)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def collect(runs: int = 5) -> dict[str, Any]:
    """Every field `doctor` shows, JSON-ready."""
    import mlx.core as mx

    from llm.default_model import cache_problem, cached_path

    blas = blas_in_use()
    problem = cache_problem(contents=True) if cached_path().exists() else "not converted yet"
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "mlx": mx.__version__,
        "device": mx.default_device().type.name,
        "blas": blas,
        "blas_hint": _blas_hint(blas),
        "matmul_fp32_1024_gflops": round(matmul_gflops(1024, runs), 1),
        "default_model_cached": problem is None,
        "default_model_path": str(cached_path()),
        "default_model_problem": problem or "",
    }


def _blas_hint(blas: str) -> str:
    """What to do when MLX's fp32 matmuls run on the reference BLAS."""
    if not blas.startswith("reference"):
        return ""
    if os.environ.get(OPT_OUT) == "1":
        return f"unset {OPT_OUT} to preload MKL (~30x faster fp32 matmul)"
    if find_mkl() is None:
        return "pip install mkl, then MKL is preloaded at start (~30x faster fp32 matmul)"
    return "start through cli.py, which preloads MKL (~30x faster fp32 matmul)"


def render(info: dict[str, Any]) -> Table:
    """The fields as a two-column rich table (empty ones left out)."""
    table = Table(title="wordle-rl doctor", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in info.items():
        if value != "":
            table.add_row(key, str(value))
    return table
