"""The update-padding benchmark runs end to end on a tiny model: each way trains the same tokens,
the cut ways compute fewer padded positions, and their gradient is the padded way's."""

from __future__ import annotations

from llm_fixtures import run_benchmark, tiny_model_dir  # noqa: F401

from bench.update_padding import main


def test_update_padding_benchmark_times_each_way_on_the_same_groups(tiny_model_dir, tmp_path):  # noqa: F811
    report = run_benchmark(main, tiny_model_dir, ["-G", "3", "--games", "2", "--max-tokens", "12", "--rounds", "1",
                                                  "--repeats", "2", "--pass-positions", "1"], tmp_path / "padding.json")
    assert set(report["ways"]) == {"padded", "cut_1"}
    (round_,) = report["per_round"]
    padded, cut = round_["ways"]["padded"], round_["ways"]["cut_1"]
    assert padded["trained_tokens"] == cut["trained_tokens"] > 0
    assert cut["answer_positions"] <= padded["answer_positions"] and cut["micro_batches"] >= padded["micro_batches"]
    assert cut["padding_share"] <= padded["padding_share"]
    assert len(padded["reference_seconds"]) == len(cut["gradient_seconds"]) == 2
    assert cut["gradient_max_difference"] <= 1e-5 * max(round_["gradient_largest"], 1e-3)
    assert report["ways"]["padded"]["speedup_over_padded"] == 1.0
