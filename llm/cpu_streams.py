"""Every core of a CPU at work on model passes: one MLX stream a core, each matmul on one thread.

On a CPU, MLX runs a stream's operations one after another on that stream's thread, and only
the matmuls (MKL, `llm/blas.py`) spread over the cores. Most of a pass on a 135M model is not
matmul: the attention's softmax, the activations, the norms run on one core while MKL's other
threads wait (a `perf` profile of a prefill, results/passes/). Independent batches of a pass
(head states' batches of positions) run instead on one stream per core, each matmul on the thread
of its own stream, so that every core does all kinds of work at once. On a GPU nothing changes:
its one stream already keeps the device busy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import mlx.core as mx

from llm.blas import blas_threads, set_blas_threads

_streams: list[mx.Stream] = []  # created once: every MLX stream owns a thread for the life of the process


def core_count() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextmanager
def core_streams(spread: bool = True) -> Iterator[list[mx.Stream]]:
    """The streams to spread independent batches over while inside: one a core on a CPU (with
    each MKL matmul kept to one thread, as it was afterwards), the default stream elsewhere or
    when not `spread` (what benchmarks compare with).

    Results are the same as on one stream up to float rounding (a matmul on one thread may add
    in another order than on several)."""
    cores = core_count()
    if not spread or mx.default_device().type != mx.cpu or cores < 2:
        yield [mx.default_stream(mx.default_device())]
        return
    while len(_streams) < cores:
        _streams.append(mx.new_stream(mx.cpu))
    threads = blas_threads()
    set_blas_threads(1)
    try:
        yield _streams[:cores]
    finally:
        if threads is not None:
            set_blas_threads(threads)
