"""Give MLX a real BLAS on Linux x86_64.

The `mlx[cpu]` Linux wheel bundles the reference BLAS, so an fp32 matmul runs at
about 5 GFLOP/s. Intel MKL (the `mkl` PyPI package) exports the same CBLAS symbols;
preloading `libmkl_rt.so.3` makes MLX's calls land in MKL instead (~50x faster).
`LD_PRELOAD` is only read when a process starts, so the one way to set it from
Python is to re-exec the interpreter with the same arguments, before anything has
imported mlx or done work worth keeping.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import os
import platform
import sys
from pathlib import Path

MKL_LIBRARY = "libmkl_rt.so.3"
OPT_OUT = "WORDLE_RL_NO_BLAS_FIX"  # set to 1 to run MLX as installed
_MARKER = "WORDLE_RL_BLAS_REEXEC"  # set in the child so a failed preload never loops


def ensure_fast_blas() -> None:
    """Re-exec this program with MKL preloaded, when that helps and is safe.

    Does nothing off Linux x86_64, without the `mkl` package, with `WORDLE_RL_NO_BLAS_FIX=1`,
    when MKL is already preloaded or after one re-exec, and in processes whose argv does not
    name a program to restart (`python -c`, an interactive shell, a pytest session: re-running
    those from the top would repeat or lose work).
    """
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return
    if os.environ.get(OPT_OUT) == "1" or os.environ.get(_MARKER):
        return
    if not _restartable():
        return
    library = find_mkl()
    preload = os.environ.get("LD_PRELOAD", "")
    if library is None or MKL_LIBRARY in preload:
        return
    env = dict(os.environ, LD_PRELOAD=f"{preload}:{library}" if preload else str(library))
    env[_MARKER] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


def _restartable() -> bool:
    """True when re-running `sys.orig_argv` restarts this same program from scratch."""
    return (
        not sys.flags.interactive and sys.argv[0] not in ("", "-c") and "_pytest" not in sys.modules
    )


def find_mkl() -> Path | None:
    """The `libmkl_rt.so.3` installed by the `mkl` distribution, wherever pip put it."""
    try:
        files = importlib.metadata.distribution("mkl").files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == MKL_LIBRARY:
            path = Path(file.locate()).resolve()
            if path.exists():
                return path
    return None


def blas_in_use() -> str:
    """Which BLAS MLX's matmuls go to in this process, read from the loaded libraries.

    Imports mlx first, so the answer covers the library MLX itself pulls in.
    """
    import mlx.core  # noqa: F401  (loads mlx's BLAS, if it has one)

    if sys.platform == "darwin":
        return "Accelerate"
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            maps = f.read()
    except OSError:
        return "unknown"
    if "libmkl_rt" in maps:
        return "mkl"
    if "libopenblas" in maps:
        return "openblas"
    if "mlx_cpu.libs/libblas" in maps or "/libblas" in maps:
        return "reference (bundled with mlx)"
    return "unknown"


def blas_threads() -> int | None:
    """Threads each MKL matmul may use in this process; None when MLX's matmuls do not go to MKL."""
    mkl = _loaded_mkl()
    return mkl.MKL_Get_Max_Threads() if mkl else None


def set_blas_threads(count: int) -> None:
    """Let each MKL matmul use `count` threads from now on (nothing when MLX does not use MKL).

    MKL's setting is process-wide and read at every call, so it can change between passes."""
    mkl = _loaded_mkl()
    if mkl:
        mkl.MKL_Set_Num_Threads(count)


@functools.cache
def _loaded_mkl() -> ctypes.CDLL | None:
    """The MKL that MLX's matmuls land in (`ensure_fast_blas`), or None: never loads another copy."""
    if blas_in_use() != "mkl":
        return None
    return ctypes.CDLL(MKL_LIBRARY)
