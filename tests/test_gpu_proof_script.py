"""results/gpu-proof/proof.sh, the script a session with a GPU runs first, played through on the CPU.

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

from llm_fixtures import tiny_model_dir  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "results" / "gpu-proof" / "proof.sh"


def tiny_rl_config(folder: Path) -> Path:
    """The shipped GPU config, shrunk: what is tested is that its keys load and run."""
    config = json.loads((REPO / "results" / "gpu-proof" / "endgame-config.json").read_text())
    config.update(eval_every=1, eval_endgame=3)
    config["rollout"].update(group_size=2, games_per_round=1, batch_size=4, max_tokens=24)
    config["grpo"].update(groups_per_step=1, micro_batch_tokens=256)
    path = folder / "rl-config.json"
    path.write_text(json.dumps(config))
    return path


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
    assert brought_back == ["endgame-paired.json", "endgame-rl.json", "endgame-sft.json", "eval-rl.json",
                            "eval-sft.json", "log.txt", "paired.json", "rl-metrics.jsonl", "rl-run.tar.00",
                            "sft-adapter.tar.00", "sft-metrics.jsonl"]
    sft, rl = (json.loads((out / name).read_text()) for name in ("eval-sft.json", "eval-rl.json"))
    secrets = [[game["secret"] for game in run["per_game"]] for run in (sft, rl)]
    assert secrets[0] == secrets[1] and len(secrets[0]) == 2  # the same test secrets for both
    phases = [json.loads(line)["phase"] for line in (out / "rl-metrics.jsonl").read_text().splitlines()]
    assert phases.count("grpo") == 1 and "heldout" in phases  # a held-out curve, not an end point
    endgame = [json.loads((out / f"endgame-{name}.json").read_text()) for name in ("sft", "rl")]
    assert [[r["key"] for r in e["per_position"]] for e in endgame] == [[r["key"] for r in endgame[0]["per_position"]]] * 2
    log = (out / "log.txt").read_text()
    assert "== " in log and "done" in log.splitlines()[-1]

    # A later session carries the run back and resumes it instead of starting again.
    carried = tmp_path / "carried"
    carried.mkdir()
    subprocess.run(f"cat {out}/rl-run.tar.* | tar -x -C {carried}", shell=True, check=True)
    again = tmp_path / "again"
    again.mkdir()
    env.update(OUT=str(again), RUN=str(tmp_path / "run2"), RL_CARRIED=str(carried / "rl"), RL_STEPS="2")
    result = subprocess.run(["bash", str(SCRIPT), "run"], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "(--resume)" in (again / "log.txt").read_text()
    steps = [json.loads(line) for line in (again / "rl-metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if r["phase"] == "grpo"] == [1, 2]  # step 1 carried, step 2 new


def test_proof_script_refuses_an_unknown_stage() -> None:
    result = subprocess.run(["bash", str(SCRIPT), "everything"], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("usage: ")
