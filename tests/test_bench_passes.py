"""The model-passes profile runs end to end on a tiny model and writes its --json."""

from __future__ import annotations

import pytest
from llm_fixtures import run_benchmark, tiny_model_dir, write_lora_adapter  # noqa: F401

from bench.passes import main


@pytest.mark.slow  # 29 s on 2 cores
def test_passes_profile_splits_eval_time_and_compares_the_ways_a_pass_runs(tiny_model_dir, tmp_path):  # noqa: F811
    write_lora_adapter(tiny_model_dir, tmp_path / "adapter")
    report = run_benchmark(main, tiny_model_dir, ["--adapter", str(tmp_path / "adapter"), "--games", "4",
                                                  "--positions", "6", "--batch-size", "4"],
                           tmp_path / "passes.json")
    ways = ["adapter_layers", "fused", "fused_core_streams", "fused_core_streams_vector_exp"]
    assert list(report["ways"]) == ways
    for name, way in report["ways"].items():
        states = way["head_states"]
        assert states["positions"] == 6 and states["shared_opening_tokens"] > 50
        assert states["tokens_per_position"] > 0 and states["s_per_position"] > 0
        played = way["eval"]
        assert played["games"] == 4 and played["answers"] >= 4 * 3
        assert played["prompt_tokens"] > 0 and played["decode_steps"] > 0
        assert played["answer_tokens"] >= played["decode_steps"]
        assert played["rest_seconds"] >= -0.5
    assert set(report["states_max_abs_difference"]) == set(ways[1:])
    assert max(report["states_max_abs_difference"].values()) < 1e-4
    pairs = [(after, before) for i, before in enumerate(ways) for after in ways[i + 1:]]
    assert {f"{after}_and_{before}" for after, before in pairs} == set(report["games_identical"])
    assert all(report["games_identical"][f"{after}_and_{before}"] == 4 for after, before in pairs
               if "vector" not in after)  # float rounding alone flips no token of a tiny model's few games
    assert all(len(way["eval"]["per_game"]) == 4 for way in report["ways"].values())
    assert set(report["eval_speedup"]) == set(report["head_states_speedup"]) == {
        f"{after}_over_{before}" for after, before in pairs}
    assert min(report["eval_speedup"].values()) > 0 and min(report["head_states_speedup"].values()) > 0
