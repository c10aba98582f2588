"""Timing the pattern matrix: what `python cli.py matrix` reports."""

from __future__ import annotations

import os
import statistics
import time

from rich.console import Console
from rich.table import Table

from solver.matrix import build_pattern_matrix, matrix_path, pattern_matrix
from solver.words import default_word_lists, load_word_lists


def benchmark_matrix(secrets: str, answers: str | None, allowed: str | None, repeat: int) -> dict:
    lists = load_word_lists(answers, allowed) if (answers or allowed) else default_word_lists()
    guesses = lists.allowed_codes
    columns = lists.answer_codes if secrets == "answers" else lists.allowed_codes
    build_pattern_matrix(guesses[:2], columns[:2])  # compile (or load numba's cache) outside the clock
    cold = []
    for _ in range(repeat):
        start = time.perf_counter()
        build_pattern_matrix(guesses, columns)
        cold.append(time.perf_counter() - start)
    pattern_matrix(lists, secrets)  # make sure the cache file exists
    cached = []
    for _ in range(repeat):
        start = time.perf_counter()
        matrix = pattern_matrix(lists, secrets)
        cached.append(time.perf_counter() - start)
    return {
        "shape": list(matrix.shape),
        "cold_seconds_median": round(statistics.median(cold), 4),
        "cached_seconds_median": round(statistics.median(cached), 4),
        "cold_seconds": [round(t, 4) for t in cold],
        "cached_seconds": [round(t, 4) for t in cached],
        "pairs_per_second": round(matrix.size / statistics.median(cold)),
        "cache_file": matrix_path(lists, secrets),
        "cache_bytes": os.path.getsize(matrix_path(lists, secrets)),
        "cpus": os.cpu_count(),
    }


def show_benchmark(result: dict) -> None:
    table = Table(title=f"pattern matrix {result['shape'][0]:,} x {result['shape'][1]:,}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("cold build, median (s)", f"{result['cold_seconds_median']:.3f}")
    table.add_row("from cache, median (s)", f"{result['cached_seconds_median']:.3f}")
    table.add_row("pairs per second", f"{result['pairs_per_second']:,}")
    table.add_row("cache file (MB)", f"{result['cache_bytes'] / 1e6:.1f}")
    Console().print(table)
