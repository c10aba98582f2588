"""The model-passes profile runs end to end on a tiny model and writes its --json."""

from __future__ import annotations

from llm_fixtures import run_benchmark, tiny_model_dir  # noqa: F401

from bench.passes import main


def test_passes_profile_splits_eval_time_and_compares_both_ways(tiny_model_dir, tmp_path):  # noqa: F811
    report = run_benchmark(main, tiny_model_dir, ["--games", "4", "--positions", "6", "--batch-size", "4"],
                           tmp_path / "passes.json")
    states = report["head_states"]
    assert states["positions"] == 6 and states["shared_opening_tokens"] > 50
    assert states["shared_tokens_per_position"] < states["whole_tokens_per_position"]
    assert states["max_abs_difference"] < 1e-4
    played = report["eval"]
    assert played["identical_records"] and played["games"] == 4
    fresh, reuse = played["fresh"], played["reuse"]
    assert reuse["prompt_tokens"] < fresh["prompt_tokens"] and reuse["answers"] == fresh["answers"]
    for figures in (fresh, reuse):
        assert figures["decode_steps"] > 0 and figures["answer_tokens"] >= figures["decode_steps"]
        assert figures["rest_seconds"] >= -0.5
