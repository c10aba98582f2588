"""One stream a core on a CPU: the streams are the process's own, and BLAS threads come back."""

from __future__ import annotations

import mlx.core as mx

from llm import cpu_streams
from llm.blas import blas_threads


def test_core_streams_give_one_stream_a_core_and_leave_the_blas_threads_as_they_were(monkeypatch):
    monkeypatch.setattr(cpu_streams, "core_count", lambda: 2)
    before = blas_threads()
    with cpu_streams.core_streams() as streams:
        assert len(streams) == 2 and len(set(map(str, streams))) == 2
        assert all(s.device == mx.cpu for s in streams)
        first = streams
        with mx.stream(streams[1]):
            total = (mx.arange(4) * 2).sum()
        assert total.item() == 12
    assert blas_threads() == before
    with cpu_streams.core_streams() as again:
        assert again == first  # made once: every stream owns a thread for the life of the process


def test_one_stream_when_not_spread_or_on_one_core(monkeypatch):
    default = mx.default_stream(mx.default_device())
    with cpu_streams.core_streams(spread=False) as streams:
        assert streams == [default]
    monkeypatch.setattr(cpu_streams, "core_count", lambda: 1)
    with cpu_streams.core_streams() as streams:
        assert streams == [default]
