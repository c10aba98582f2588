"""The GRPO step profile runs end to end on a tiny model and splits the step's time."""

from __future__ import annotations

import pytest
from llm_fixtures import run_benchmark, tiny_model_dir  # noqa: F401

from bench.rl_step import main


def test_rl_step_profile_splits_rollout_and_update_and_rates_the_matmuls(tiny_model_dir, tmp_path):  # noqa: F811
    report = run_benchmark(main, tiny_model_dir, ["-G", "2", "--games", "2", "--max-tokens", "8", "--steps", "2"],
                           tmp_path / "step.json")
    assert report["steps"] == 2 and len(report["per_step"]) == 2 and report["matmul_gflops"] > 0
    for step in report["per_step"]:
        assert step["rollout_prompt_tokens"] > 0 and step["rollout_decode_steps"] > 0
        assert step["rollout_prefill_seconds"] > 0 and step["rollout_decode_seconds"] > 0
        assert step["rollout_rest_seconds"] == pytest.approx(
            step["rollout_seconds"] - step["rollout_prefill_seconds"] - step["rollout_decode_seconds"])
        assert step["seconds"] == pytest.approx(step["rollout_seconds"] + step["update_seconds"])
        assert 0 < step["reference_seconds"] < step["update_seconds"]
        assert step["gradient_seconds"] == pytest.approx(step["update_seconds"] - step["reference_seconds"])
        assert step["update_positions"] > step["trained_tokens"]  # the prompts' positions too
        assert all(step[rate] > 0 for rate in ("prefill_gflops", "decode_gflops", "reference_gflops",
                                               "gradient_gflops"))
    assert report["median_seconds"] > 0 and report["median_gradient_gflops"] > 0
