"""The single-turn GRPO benchmark's own side runs end to end on a tiny model and splits each step's time."""

from __future__ import annotations

from llm_fixtures import run_benchmark, tiny_model_dir  # noqa: F401

from bench.mlx_lm_lora import main


def test_our_side_reports_each_step_split_into_sampling_and_update(tiny_model_dir, tmp_path):  # noqa: F811
    report = run_benchmark(main, tiny_model_dir, ["--side", "ours", "-G", "2", "--steps", "2", "--max-tokens", "8"],
                           tmp_path / "ours.json")
    assert report["side"] == "ours" and len(report["per_step"]) == 2
    for step in report["per_step"]:
        assert step["sample_seconds"] > 0 and step["update_seconds"] > 0
        assert abs(step["sample_seconds"] + step["update_seconds"] - step["seconds"]) < 0.05 * step["seconds"] + 0.01
    timed = report["per_step"][1]  # the first step is warm-up
    assert report["median_sample_seconds"] == timed["sample_seconds"]
