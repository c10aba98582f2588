"""Shared pytest fixtures for tests that need a model.

Use in a test module with `from llm_fixtures import tiny_model_dir  # noqa: F401`
(pytest puts tests/ on sys.path), then take `tiny_model_dir` as an argument.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import mlx.core as mx
import numpy as np
import pytest

from llm.tiny import cached_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama folder (2 layers, hidden 64, ~400-token BPE), built once per session."""
    return cached_tiny_model(tmp_path_factory.getbasetemp() / "models")


def forcing(processor: Callable, script: list[int]) -> Callable:
    """A logits processor that makes an answer open with the tokens of `script`, then leaves
    it to `processor` (which sees every call, so it follows the answer from its start)."""
    step = {"n": 0}

    def forced(context: mx.array, logits: mx.array) -> mx.array:
        logits = processor(context, logits)
        if step["n"] < len(script):
            mask = np.full(logits.shape[-1], -np.inf, dtype=np.float32)
            mask[script[step["n"]]] = 0.0
            logits = logits + mx.array(mask)
        step["n"] += 1
        return logits
    return forced
