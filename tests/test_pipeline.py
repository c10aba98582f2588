"""The one-command pipeline on the tiny model: every stage, the comparison, and resume."""

import json

import pytest
from click.testing import CliRunner

from cli import cli
from llm.tiny import cached_tiny_model
from rl.pipeline import MODELS, STAGES_FILE, PipelineSettings, run_pipeline


def test_pipeline_runs_every_stage_and_resumes(tmp_path_factory, tmp_path, monkeypatch):
    tiny = str(cached_tiny_model(tmp_path_factory.mktemp("tiny")))
    settings = PipelineSettings(model=tiny, sft_games=12, sft_iters=2, rl_steps=2, rl_games=2, group_size=2,
                                eval_games=3, max_tokens=12, ei_replay=3, ei_drill=2,
                                ei_drill_depth=2)
    out = tmp_path / "run"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the RL stage dies before its first checkpoint

    monkeypatch.setattr("rl.loop.save_checkpoint", killed)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(out, settings, show_progress=False)
    monkeypatch.undo()
    assert list(json.loads((out / STAGES_FILE).read_text())["stages"]) == ["gen-sft", "sft"]
    assert (out / "rl" / "config.json").is_file() and not (out / "rl" / "latest").exists()

    # Run again: the finished stages are skipped and RL starts over.
    summary = run_pipeline(out, settings, show_progress=False)
    stages = json.loads((out / STAGES_FILE).read_text())["stages"]
    assert list(stages) == ["gen-sft", "sft", "rl", "eval-base", "eval-sft", "eval-rl"]
    assert (out / "sft" / "adapter" / "adapters.safetensors").is_file()
    assert (out / "rl" / "adapter" / "adapters.safetensors").is_file()
    secrets = [[g["secret"] for g in json.loads((out / f"eval-{m}.json").read_text())["per_game"]] for m in MODELS]
    assert secrets[0] == secrets[1] == secrets[2] and len(set(secrets[0])) == 3  # same held-out secrets
    assert all(summary["eval"][m]["games"] == 3 for m in MODELS)
    verdict = summary["rl_vs_sft"]  # RL against SFT on those secrets, paired
    assert {"judged", "improved", "beyond_noise", "wrong_way", "changes"} <= verdict.keys()
    assert verdict["summary"].startswith("RL ")
    assert stages["sft"]["steps"] == 2 and stages["rl"]["steps"] == 2
    assert stages["gen-sft"]["examples"] > 12
    rl_config = json.loads((out / "rl" / "config.json").read_text())
    assert rl_config["ei"]["replay"] == 3 and rl_config["ei"]["drill"] == 2 and rl_config["ei"]["drill_depth"] == 2
    ei_steps = [json.loads(line) for line in (out / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert [r["replayed"] for r in ei_steps if r.get("phase") == "ei"] == [7, 7]  # 3 fresh + 2 drilled a depth

    # A second run finds every stage done and only re-prints the comparison.
    again = run_pipeline(out, settings, show_progress=False)
    assert again["eval"] == summary["eval"]


def test_pipeline_refuses_other_settings_in_same_folder(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / STAGES_FILE).write_text(json.dumps({"settings": {"model": "x"}, "stages": {}}))
    result = CliRunner().invoke(cli, ["pipeline", "--out", str(out)])
    assert result.exit_code == 2 and "other settings" in result.output


def test_pipeline_bad_values():
    result = CliRunner().invoke(cli, ["pipeline", "--out", "/tmp/never-made", "--sft-iters", "0"])
    assert result.exit_code == 2 and "--sft-iters must be positive" in result.output
