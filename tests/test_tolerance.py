"""Comparison tolerances that follow the weights' dtype and the device (llm/tolerance.py).

On an H100 with float32 weights the shared-prompt cache differed from a plain pass by
0.0065 at log-probs of about -23 (TF32 matmuls against a full-float32 decode matvec), and
a fixed 1e-4 refused the model. These tests show on the CPU that the GPU tolerances
accept that difference, yet still refuse a cache that is really wrong.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)

from common.errors import UserError
from llm.loading import load_model
from llm.tolerance import logit_tolerance, weight_dtype
from rl import grpo
from rl.grpo import answer_logprobs, check_shared_prompt, prompt_kv, shared_prompt_matches

CPU, GPU = mx.Device(mx.cpu), mx.Device(mx.gpu)
PROMPT, ANSWERS = mx.array([1, 5, 9, 3]), mx.array([[7, 2], [4, 4]])
WRONG_CACHES = {
    "another prompt": mx.array([8, 6, 2, 3]),
    "one token later": mx.array([1, 1, 5, 9, 3]),
    "one token earlier": mx.array([5, 9, 3]),
}


@pytest.fixture(scope="module")
def model(tiny_model_dir):  # noqa: F811
    return load_model(str(tiny_model_dir))[0]


def plain_logprobs(model: nn.Module) -> mx.array:
    """ANSWERS' log-probs after PROMPT from one forward pass over the whole sequences."""
    tokens = mx.concatenate([mx.broadcast_to(PROMPT[None], (2, 4)), ANSWERS[:, :-1]], axis=1)
    return -nn.losses.cross_entropy(model(tokens)[:, 3:].astype(mx.float32), ANSWERS)


def test_float32_on_gpu_accepts_the_h100_difference_the_cpu_refuses() -> None:
    plain = mx.array(np.linspace(-23.5, -22.5, 8, dtype=np.float32))
    shared = plain + 0.0065  # the largest difference measured on an H100, at log-probs of about -23
    assert shared_prompt_matches(shared, plain, mx.float32, GPU)
    assert not shared_prompt_matches(shared, plain, mx.float32, CPU)


def looser(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether tolerance `a` is wider than `b` in both rtol and atol."""
    return all(x > y for x, y in zip(a, b))


def test_half_precision_is_looser_than_float32_on_any_device() -> None:
    for device in (CPU, GPU):
        assert looser(logit_tolerance(mx.bfloat16, device), logit_tolerance(mx.float16, device))
        assert looser(logit_tolerance(mx.float16, device), logit_tolerance(mx.float32, CPU))
    assert looser(logit_tolerance(mx.float32, GPU), logit_tolerance(mx.float32, CPU))


def test_weight_dtype_is_the_least_precise_floating_parameter(model) -> None:
    assert weight_dtype(model) == mx.float32
    mlp = model.model.layers[0].mlp
    original = mlp.down_proj.weight
    mlp.down_proj.weight = original.astype(mx.bfloat16)
    try:
        assert weight_dtype(model) == mx.bfloat16
    finally:
        mlp.down_proj.weight = original


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_gpu_tolerance_accepts_the_right_cache(model, dtype) -> None:
    shared = answer_logprobs(model, prompt_kv(model, PROMPT), PROMPT, ANSWERS, 1.0)
    assert shared_prompt_matches(shared, plain_logprobs(model), dtype, GPU)


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
@pytest.mark.parametrize("cache_of", WRONG_CACHES.values(), ids=WRONG_CACHES.keys())
def test_gpu_tolerance_refuses_a_wrong_cache(model, dtype, cache_of) -> None:
    # The tiny random model's log-probs (about -2 to -7) move with the context: each wrong cache
    # moves one by 0.40 to 1.34, where even bfloat16 allows at most 3e-2 * 7 + 3e-2 = 0.24, so
    # its weights need no scaling up to make a wrong cache show.
    shared = answer_logprobs(model, prompt_kv(model, cache_of), PROMPT, ANSWERS, 1.0)
    assert not shared_prompt_matches(shared, plain_logprobs(model), dtype, GPU)


def test_check_shared_prompt_passes_the_tiny_model_on_the_cpu(model) -> None:
    with mx.stream(mx.cpu):
        check_shared_prompt(model)


def test_check_shared_prompt_reports_difference_and_tolerance(model, monkeypatch) -> None:
    monkeypatch.setattr(grpo, "prompt_kv", lambda m, prompt: prompt_kv(m, WRONG_CACHES["another prompt"]))
    message = r"differ by up to \d.*; float32 weights on the cpu allow rtol 1e-05, atol 0\.0001\)$"
    with mx.stream(mx.cpu), pytest.raises(UserError, match=message):
        check_shared_prompt(model)
