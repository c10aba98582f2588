"""The update-ceiling benchmark runs end to end on a tiny model and its ceilings follow from its timings."""

from __future__ import annotations

from llm_fixtures import run_benchmark, tiny_model_dir  # noqa: F401

from bench.update import main


def test_update_ceiling_benchmark_reports_both_ceilings(tiny_model_dir, tmp_path):  # noqa: F811
    report = run_benchmark(main, tiny_model_dir, ["--prompt-tokens", "6", "--answers", "2", "--answer-tokens", "5",
                                                  "--steps", "2"], tmp_path / "update.json")
    assert report["forward_s"] > 0 and report["forward_backward_s"] > 0
    assert abs(report["forward_tokens_per_s"] - 16 / report["forward_s"]) <= 0.05 * report["forward_tokens_per_s"]
    with_reference = 10 / (report["forward_s"] + report["forward_backward_s"])
    assert abs(report["trained_tokens_per_s_ceiling"] - with_reference) <= 0.05 * with_reference + 0.1
    assert report["trained_tokens_per_s_ceiling"] < report["trained_tokens_per_s_ceiling_without_reference"]
