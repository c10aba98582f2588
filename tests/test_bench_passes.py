"""The model-passes profile runs end to end on a tiny model and writes its --json."""

from __future__ import annotations

from llm_fixtures import run_benchmark, tiny_model_dir, write_lora_adapter  # noqa: F401

from bench.passes import main


def test_passes_profile_splits_eval_time_and_compares_adapter_layers_with_fused(tiny_model_dir, tmp_path):  # noqa: F811
    write_lora_adapter(tiny_model_dir, tmp_path / "adapter")
    report = run_benchmark(main, tiny_model_dir, ["--adapter", str(tmp_path / "adapter"), "--games", "4",
                                                  "--positions", "6", "--batch-size", "4"],
                           tmp_path / "passes.json")
    assert set(report["ways"]) == {"adapter_layers", "fused"}
    for way in report["ways"].values():
        states = way["head_states"]
        assert states["positions"] == 6 and states["shared_opening_tokens"] > 50
        assert states["tokens_per_position"] > 0 and states["s_per_position"] > 0
        played = way["eval"]
        assert played["games"] == 4 and played["answers"] >= 4 * 3
        assert played["prompt_tokens"] > 0 and played["decode_steps"] > 0
        assert played["answer_tokens"] >= played["decode_steps"]
        assert played["rest_seconds"] >= -0.5
    assert report["states_max_abs_difference"] < 1e-4
    assert report["games_identical"] == 4
    assert report["eval_speedup"] > 0 and report["head_states_speedup"] > 0
