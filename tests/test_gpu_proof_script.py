"""gpu_kit/proof.sh, the script a session with a GPU runs first, played through on the CPU.

A GPU session has 15 minutes of device time: a typo found there costs the proof. This runs the
script's whole path (gen-sft, SFT, eval, RL under its time budget, eval, compare) with the tiny
model and tiny sizes, and checks that the files a device call brings back are there and whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_fixtures import tiny_model_dir  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "gpu_kit"
SCRIPT = KIT / "proof.sh"


def tiny_rl_config(folder: Path) -> Path:
    """The shipped GPU config, shrunk: what is tested is that its keys load and run."""
    config = json.loads((KIT / "endgame-config.json").read_text())
    config.update(eval_every=1, eval_endgame=3)
    config["rollout"].update(group_size=2, games_per_round=1, batch_size=4, max_tokens=24)
    config["grpo"].update(groups_per_step=1, micro_batch_tokens=256)
    path = folder / "rl-config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.slow  # 30-45 s: the GPU recipe end to end on a tiny model
def test_proof_script_runs_every_stage_and_brings_back_its_files(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = dict(
        os.environ, OUT=str(out), KIT="0", MODEL=str(tiny_model_dir), RUN=str(tmp_path / "run"),
        START_ADAPTER=str(tmp_path / "no-adapter"), BUDGET_S="600", SFT_GAMES="20", SFT_ITERS="2",
        SFT_BATCH="2", SFT_RANK="4", EVAL_GAMES="2", EVAL_BATCH="2", RL_STEPS="1", ENDGAME_POSITIONS="4", BENCH="0",
        RL_CONFIG=str(tiny_rl_config(tmp_path)), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    )
    result = subprocess.run(["bash", str(SCRIPT), "run"], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    brought_back = sorted(p.name for p in out.iterdir())
    assert brought_back == ["log.txt", "results.tar", "rl-policy.tar.00", "sft-adapter.tar.00"]  # a call's 8 at most
    results = unpacked(out / "results.tar", tmp_path / "results")
    assert sorted(p.name for p in results.iterdir()) == [
        "endgame-paired.json", "endgame-rl.json", "endgame-sft.json", "eval-rl.json", "eval-sft.json", "paired.json",
        "rl-best.json", "rl-metrics.jsonl", "rl-summary.json", "sft-metrics.jsonl"]
    sft, rl = (json.loads((results / name).read_text()) for name in ("eval-sft.json", "eval-rl.json"))
    secrets = [[game["secret"] for game in run["per_game"]] for run in (sft, rl)]
    assert secrets[0] == secrets[1] and len(secrets[0]) == 2  # the same test secrets for both
    phases = [json.loads(line)["phase"] for line in (results / "rl-metrics.jsonl").read_text().splitlines()]
    assert phases.count("grpo") == 1 and "heldout" in phases  # a held-out curve, not an end point
    endgame = [json.loads((results / f"endgame-{name}.json").read_text()) for name in ("sft", "rl")]
    assert [[r["key"] for r in e["per_position"]] for e in endgame] == [[r["key"] for r in endgame[0]["per_position"]]] * 2
    log = (out / "log.txt").read_text()
    assert "== " in log and "done" in log.splitlines()[-1]

    # The returned policy loads as it is: RUN/best, or a checkpoint beside the start adapter it is stacked on.
    policy = unpacked(out / "rl-policy.tar.00", tmp_path / "policy")
    (adapter,) = [p.parent for p in policy.rglob("adapters.safetensors") if "start_adapter" not in p.parts]
    below = json.loads((adapter / "adapter_config.json").read_text()).get("stacked_on")
    assert below is None or (adapter / below / "adapters.safetensors").is_file()

    # A later lease with a carried adapter and the start's games carried runs neither SFT nor those games.
    again = tmp_path / "again"
    again.mkdir()
    env.update(OUT=str(again), RUN=str(tmp_path / "run2"), START_ADAPTER=str(tmp_path / "run" / "sft" / "adapter"),
               START_GAMES=str(results / "eval-rl.json"))
    result = subprocess.run(["bash", str(SCRIPT), "run"], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = (again / "log.txt").read_text()
    assert "carried SFT adapter" in log and "the start's games carried" in log and "gen-sft" not in log
    paired = json.loads((unpacked(again / "results.tar", tmp_path / "results2") / "paired.json").read_text())
    assert paired["paired_wins"]["games"] == 2


@pytest.mark.slow  # 30-45 s: the GPU recipe end to end on a tiny model
def test_proof_script_with_head_fits_it_on_the_start_and_plays_the_same_positions_and_games(
        tmp_path: Path, tiny_model_dir: Path) -> None:  # noqa: F811
    """HEAD=1: no RL; the naming head on a copy of the carried adapter, its file and record brought
    back, and the start's endgame positions and test games played again with it, paired."""
    from llm.adapter_files import save_adapter
    from llm.loading import load_model
    from sft.lora import AdapterSettings, attach_adapter, trainable_weights

    model, _ = load_model(str(tiny_model_dir))
    config = attach_adapter(model, AdapterSettings(rank=2))
    adapter = save_adapter(tmp_path / "start", trainable_weights(model), config)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(
        os.environ, OUT=str(out), KIT="0", MODEL=str(tiny_model_dir), RUN=str(tmp_path / "run"), HEAD="1",
        HEAD_POSITIONS="4", START_ADAPTER=str(adapter), BUDGET_S="600", EVAL_GAMES="2", EVAL_BATCH="2",
        ENDGAME_POSITIONS="4", BENCH="0", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    )
    result = subprocess.run(["bash", str(SCRIPT), "run"], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "results.tar"]
    results = unpacked(out / "results.tar", tmp_path / "results")
    assert sorted(p.name for p in results.iterdir()) == [
        "endgame-head-paired.json", "endgame-head.json", "endgame-sft.json", "eval-head.json", "eval-sft.json",
        "head-paired.json", "naming-head.json", "naming_head.npz"]
    head = json.loads((results / "eval-head.json").read_text())
    assert head["policy"].endswith("+naming head") and json.loads((results / "head-paired.json").read_text())[
        "paired_wins"]["games"] == 2
    assert json.loads((results / "naming-head.json").read_text())["positions"]["train"] == 4
    assert not (adapter / "naming_head.npz").exists()  # the carried adapter is left as it came
    assert "rl for at most" not in (out / "log.txt").read_text()


def unpacked(tar: Path, folder: Path) -> Path:
    folder.mkdir()
    subprocess.run(["tar", "-xf", str(tar), "-C", str(folder)], check=True)
    return folder


def test_proof_script_refuses_an_unknown_stage() -> None:
    result = subprocess.run(["bash", str(SCRIPT), "everything"], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("usage: ")


def test_proof_script_default_config_is_the_kit_s() -> None:
    """The test above passes RL_CONFIG; the default the GPU run takes must name a file in the repo."""
    (default,) = [line.split(":-", 1)[1].rstrip("}") for line in SCRIPT.read_text().splitlines()
                  if line.startswith("RL_CONFIG=")]
    assert (REPO / default).is_file() and (REPO / default).parent == KIT
