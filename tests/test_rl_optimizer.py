"""RL's Adam warm-up: the rate each update uses, read back from the optimizer as metrics.jsonl logs it."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest

from rl.optimizer import rl_optimizer


def test_the_warm_up_rate_is_never_zero_and_reaches_the_learning_rate() -> None:
    layer = nn.Linear(3, 2)
    optimizer = rl_optimizer(3e-4, warmup_steps=2)
    logged = []
    for _ in range(4):
        grads = {"weight": mx.ones_like(layer.weight), "bias": mx.ones_like(layer.bias)}
        optimizer.update(layer, grads)
        logged.append(optimizer.learning_rate.item())
    assert logged == pytest.approx([1e-4, 2e-4, 3e-4, 3e-4], rel=1e-6)
