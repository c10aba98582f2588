"""The model-passes profile runs end to end on a tiny model and writes its --json."""

from __future__ import annotations

from llm_fixtures import run_benchmark, tiny_model_dir  # noqa: F401

from bench.passes import main


def test_passes_profile_splits_eval_time_and_compares_state_passes_both_ways(tiny_model_dir, tmp_path):  # noqa: F811
    report = run_benchmark(main, tiny_model_dir, ["--games", "4", "--positions", "6", "--batch-size", "4"],
                           tmp_path / "passes.json")
    states = report["head_states"]
    assert states["positions"] == 6 and states["shared_opening_tokens"] > 50
    assert states["shared_tokens_per_position"] < states["whole_tokens_per_position"]
    assert states["max_abs_difference"] < 1e-4
    played = report["eval"]
    assert played["games"] == 4 and played["answers"] >= 4 * 3
    assert played["prompt_tokens"] > 0 and played["decode_steps"] > 0
    assert played["answer_tokens"] >= played["decode_steps"]
    assert played["rest_seconds"] >= -0.5
