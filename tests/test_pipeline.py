"""The one-command pipeline on the tiny model: every stage, the comparison, and resume."""

import json
from dataclasses import asdict

import pytest
from click.testing import CliRunner
from tiny_model import cached_tiny_model

from cli import cli
from rl.pipeline import MODELS, STAGES_FILE, PipelineSettings, comparison_table, run_pipeline


@pytest.mark.slow  # 71 s on 2 cores: the default suite was 11:24 at ed6e44a, over its 10 minutes
def test_pipeline_runs_every_stage_and_resumes(tmp_path_factory, tmp_path, monkeypatch):
    tiny = str(cached_tiny_model(tmp_path_factory.mktemp("tiny")))
    settings = PipelineSettings(model=tiny, sft_games=12, sft_iters=2, rl_steps=2, rl_games=2, group_size=2,
                                eval_games=3, max_tokens=12, ei_replay=3, ei_drill=2,
                                ei_drill_depth=2, naming_head=4)
    out = tmp_path / "run"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the RL stage dies before its first checkpoint

    monkeypatch.setattr("rl.lora_loop.save_checkpoint", killed)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(out, settings, show_progress=False)
    monkeypatch.undo()
    assert list(json.loads((out / STAGES_FILE).read_text())["stages"]) == ["gen-sft", "sft"]
    assert (out / "rl" / "config.json").is_file() and not (out / "rl" / "latest").exists()

    # Run again: the finished stages are skipped and RL starts over.
    summary = run_pipeline(out, settings, show_progress=False)
    stages = json.loads((out / STAGES_FILE).read_text())["stages"]
    assert list(stages) == ["gen-sft", "sft", "rl", "naming-head", "eval-base", "eval-sft", "eval-rl"]
    assert stages["naming-head"]["positions"] == {"train": 4, "validation": 100}
    policies = [json.loads((out / f"eval-{m}.json").read_text())["policy"] for m in MODELS]
    assert policies[2].endswith("+naming head") and "naming head" not in policies[1]  # RL plays with it
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


def test_pipeline_continues_with_its_own_settings_and_names_a_changed_flag(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    settings = asdict(PipelineSettings(model=str(tmp_path / "no-model"), sft_iters=3))
    (out / STAGES_FILE).write_text(json.dumps({"settings": settings, "stages": {}}))
    result = CliRunner().invoke(cli, ["pipeline", "--out", str(out), "--sft-iters", "3", "--rl-steps", "9",
                                      "--model", str(tmp_path / "other")])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {out} holds a pipeline run that continues as it started: its settings "
                                     "may not change (got --model, --rl-steps); choose another --out for a new run")
    # The same flags, or none: the run's own settings (its model is missing here, so that is where it stops).
    for flags in (["--sft-iters", "3"], ["--resume"]):
        result = CliRunner().invoke(cli, ["pipeline", "--out", str(out), *flags])
        assert result.exit_code == 2 and "no-model" in result.stderr, result.output
    (out / STAGES_FILE).write_text(json.dumps({"settings": {"model": "x"}, "stages": {}}))
    result = CliRunner().invoke(cli, ["pipeline", "--out", str(out)])
    assert result.exit_code == 2 and "does not hold this version's pipeline settings" in result.stderr


def test_pipeline_resume_needs_a_run(tmp_path):
    result = CliRunner().invoke(cli, ["pipeline", "--out", str(tmp_path / "run"), "--resume"])
    assert result.exit_code == 2 and "holds no pipeline run to continue" in result.stderr
    assert not (tmp_path / "run").exists()


def test_pipeline_bad_values():
    result = CliRunner().invoke(cli, ["pipeline", "--out", "/tmp/never-made", "--sft-iters", "0"])
    assert result.exit_code == 2 and "'--sft-iters': 0 is not in the range" in result.output
    result = CliRunner().invoke(cli, ["pipeline", "--out", "/tmp/never-made", "--sft-start", "/no/such/adapter"])
    assert result.exit_code == 2 and "--sft-start /no/such/adapter: not an adapter folder" in result.stderr
    result = CliRunner().invoke(cli, ["pipeline", "--out", "/tmp/never-made", "--model", "/no/such/model",
                                      "--sft-start", "bundled"])
    assert result.exit_code == 2 and "the default model's SFT start" in result.stderr


@pytest.mark.slow  # 42 s on 2 cores
def test_pipeline_from_an_sft_start_fits_a_head_trains_it_and_compares_four_models(tmp_path_factory, tmp_path,
                                                                                    monkeypatch):
    """From an SFT adapter folder (what the bundled start is for the default model): the start is
    copied, a naming head fitted on it, head RL trains it, and base, SFT (no head), SFT with its
    head and RL play the same held-out secrets; killed in RL, the same call finishes the run."""
    import mlx.core as mx

    from llm.adapter_files import save_adapter
    from llm.loading import load_model
    from sft.lora import AdapterSettings, attach_adapter, trainable_weights

    tiny = cached_tiny_model(tmp_path_factory.mktemp("tiny"))
    model, _ = load_model(str(tiny))
    mx.random.seed(0)
    config = attach_adapter(model, AdapterSettings(rank=2))
    start = save_adapter(tmp_path / "start", trainable_weights(model), config)
    settings = PipelineSettings(model=str(tiny), sft_start=str(start), start_head=4, head_rl_steps=2, head_games=2,
                                head_eval_every=1, eval_games=3, max_tokens=12, eval_start_head=True)
    out = tmp_path / "run"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("rl.head_loop.save_checkpoint", killed)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(out, settings, show_progress=False)
    monkeypatch.undo()
    assert list(json.loads((out / STAGES_FILE).read_text())["stages"]) == ["sft", "naming-head"]

    summary = run_pipeline(out, settings, show_progress=False)
    stages = json.loads((out / STAGES_FILE).read_text())["stages"]
    models = ["base", "sft", "sft-head", "rl"]
    assert list(stages) == ["sft", "naming-head", "rl", *(f"eval-{m}" for m in models)]
    assert summary["models"] == models and stages["rl"]["steps"] == 2
    results = {m: json.loads((out / f"eval-{m}.json").read_text()) for m in models}
    assert "naming head" not in results["sft"]["policy"] and results["sft-head"]["policy"].endswith("+naming head")
    assert results["rl"]["naming_head"] == str(out / "rl" / "best" / "naming_head.npz")
    secrets = [[g["secret"] for g in results[m]["per_game"]] for m in models]
    assert all(s == secrets[0] for s in secrets)
    assert (out / "sft" / "adapter" / "adapters.safetensors").read_bytes() == (start / "adapters.safetensors").read_bytes()
    table = comparison_table(summary)
    assert [c.header for c in table.columns] == ["figure", *models[:-1], f"rl (step {summary['rl_compared_step']})",
                                                 "solver"]
    solver = dict(zip(table.columns[0]._cells, table.columns[-1]._cells))
    assert solver["wins"] == str(results["sft"]["solver_same_secrets"]["wins"]) == "3"
    assert solver["games"] == "3" and solver["format-valid rate"] == "-"


def test_the_bundled_start_is_verified_and_a_damaged_copy_is_one_clear_error(tmp_path):
    import shutil

    from common.errors import UserError
    from llm.bundled_start import FOLDER, SHA256, copy_start, verified_start

    assert verified_start() == FOLDER and (FOLDER / "adapters.safetensors").stat().st_size <= 10_000_000
    copy = copy_start(tmp_path / "start")
    assert verified_start(copy) == copy
    with open(copy / "adapters.safetensors", "r+b") as f:
        f.truncate(1000)
    with pytest.raises(UserError, match="is damaged"):
        verified_start(copy, SHA256)
    shutil.rmtree(copy)
    with pytest.raises(UserError, match="is missing"):
        verified_start(copy)
