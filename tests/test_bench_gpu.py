"""The GPU benchmark runs every part end to end on the CPU with a tiny model and writes its --json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llm_fixtures import run_benchmark, tiny_model_dir  # noqa: F401

from bench.gpu import main

PARTS = ("gen_sft", "sft", "mlx_lm_lora", "decode", "grpo", "eval")
TINY = ["--sft-games", "20", "--sft-steps", "2", "--sft-batch", "2", "--rows", "2", "--context", "8",
        "--decode-steps", "3", "--groups", "1", "--group-size", "2", "--max-tokens", "8", "--eval-games", "2",
        "--eval-batch", "2"]
ROOT = Path(__file__).resolve().parent.parent


def test_every_part_reports_positive_figures(tiny_model_dir, tmp_path):  # noqa: F811
    report = run_benchmark(main, tiny_model_dir, TINY, tmp_path / "gpu.json")
    assert set(report["parts"]) == set(PARTS)
    assert report["device"] and report["mlx"] and report["mlx_lm"] and report["weights_dtype"] == "float32"
    parts = report["parts"]
    for name in ("gen_sft", "sft", "decode", "grpo", "eval"):
        assert "error" not in parts[name], (name, parts[name])
    for name, figures in parts.items():
        assert figures["part_seconds"] > 0
        if "error" not in figures and name != "gen_sft":  # gen-sft is the solver's: no mlx memory
            assert figures["peak_memory_gb"] > 0, name
    assert parts["gen_sft"]["examples"] > 0
    assert parts["sft"]["tokens_per_s"] > 0 and parts["sft"]["step_seconds"] > 0 and parts["sft"]["steps"] == 2
    theirs = parts["mlx_lm_lora"]
    if "error" in theirs:  # mlx-lm's trainer may not take the tiny model: then the reason is recorded
        assert theirs["error"].strip()
    else:
        assert theirs["tokens_per_s"] > 0 and theirs["answer_tokens_per_s"] > 0
        assert theirs["ours_over_mlx_lm"] > 0
    assert parts["decode"]["rows"]["2"]["step_ms"] > 0 and parts["decode"]["rows"]["2"]["tokens_per_s"] > 0
    grpo = parts["grpo"]
    assert grpo["step_seconds"] > 0 and grpo["rollout_seconds"] > 0 and grpo["update_seconds"] > 0
    assert grpo["trained_groups"] == 1 and grpo["answer_tokens"] > 0
    assert parts["eval"]["games"] == 2 and parts["eval"]["games_per_s"] > 0
    assert set(report["targets"]) == {"sft_tokens_per_s", "sft_over_mlx_lm", "eval_games_per_s", "grpo_step_seconds",
                                      "sft_peak_memory_gb"}
    assert report["targets"]["grpo_step_seconds"]["value"] == grpo["step_seconds"]


def test_a_missing_model_is_one_error_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.gpu", "--model", str(tmp_path / "no-such-model"),
                           "--json", str(tmp_path / "gpu.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    assert not (tmp_path / "gpu.json").exists()
