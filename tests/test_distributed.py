"""Data parallelism with mlx.distributed: 2 processes on the ring backend over localhost.

Two ranks' combined update equals one process's update on the same global batch (SFT
and GRPO); 2-process `sft` and `rl` runs are killed in the middle of a checkpoint save
and resume onto the trajectory they were on, rank 0 alone writing the run folder; a
single process is a group of one and runs no collective.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from distributed_worker import grpo_update, sft_step
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)
from test_rl import LAUNCHER, TINY_RUN, start_adapter  # noqa: F401  (fixture)
from test_sft import solver_conversations, write_jsonl

from cli import cli
from common.errors import UserError
from llm import distributed
from rl.lora_loop import TIMING_FIGURES
from sft.checkpoint import latest_checkpoint
from solver.setup import load_setup

REPO = Path(__file__).resolve().parent.parent
MLX_LAUNCH = shutil.which("mlx.launch")
needs_launch = pytest.mark.skipif(MLX_LAUNCH is None, reason="mlx.launch is not on PATH")
# TINY_RUN with enough games, groups, positions and examples per step for two processes.
TWO_RANK_RUN = {**TINY_RUN, "rollout": {**TINY_RUN["rollout"], "games_per_round": 2},
                "grpo": {**TINY_RUN["grpo"], "groups_per_step": 2},
                "ei": {**TINY_RUN["ei"], "positions": "sampled", "states_per_step": 2, "batch_size": 2}}
RL_FILES = {".lock", "adapter", "best", "best.json", "checkpoints", "config.json", "latest", "metrics.jsonl",
            "run.json", "start_adapter"}  # .lock: the run lock (common/run_lock.py) stays, unlocked


def free_port() -> int:
    """A port for rank 0's ring socket (rank 1 takes the next): tests running at once must not collide."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(*args, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    """`mlx.launch --backend ring -n 2 python ARGS` from the repository, in its own process group."""
    command = [MLX_LAUNCH, "--backend", "ring", "-n", "2", "--starting-port", str(free_port()), sys.executable,
               *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if wait:
        return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def kill_during_save(marker: Path, *cli_args) -> None:
    """Run `cli.py CLI_ARGS` on 2 ranks through LAUNCHER and kill every process while rank 0 saves step 2."""
    process = launch(marker.parent / "launch.py", marker, *cli_args, wait=False)
    deadline = time.monotonic() + 240
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), process.stderr.read().decode()[-2000:]
    os.killpg(process.pid, signal.SIGKILL)  # mlx.launch and both ranks: they share its process group
    process.wait()


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_single_process_is_a_group_of_one() -> None:
    assert distributed.world() == distributed.World(rank=0, size=1)
    batch, grads = [1, 2, 3], {"w": mx.ones(3)}
    assert distributed.mine(batch) is batch and distributed.portion(1, "games") == 1
    assert distributed.combine_gradients(grads, 0.25) is grads
    assert distributed.total([2.0, 3.0]) == [2.0, 3.0] and distributed.gather_json({"a": 1}) == [{"a": 1}]
    assert distributed.main_decides(False) is False and distributed.rank_seed(7) == 7
    assert distributed.pooled_std(np.array([1.0, 3.0])) == 1.0
    with pytest.raises(UserError, match="checkpointed by 2 process"):
        distributed.check_same_size(2)


@pytest.mark.slow  # 23 s on 2 cores
@needs_launch
def test_two_ranks_update_like_one_process_on_the_whole_batch(tmp_path, tiny_model_dir) -> None:  # noqa: F811
    result = launch(REPO / "tests" / "distributed_worker.py", tiny_model_dir, tmp_path)
    assert (tmp_path / "grpo-rank1.npz").is_file(), result.stdout[-2000:] + result.stderr[-2000:]
    setup = load_setup("answers")
    for name, update in (("sft", sft_step), ("grpo", grpo_update)):
        expected, figures = update(str(tiny_model_dir), setup)  # this process: world size 1, the whole batch
        ranks = [np.load(tmp_path / f"{name}-rank{r}.npz") for r in (0, 1)]
        for key, value in expected.items():
            assert np.array_equal(ranks[0][key], ranks[1][key]), (name, key)  # both ranks took the same step
            np.testing.assert_allclose(ranks[0][key], value, atol=1e-5, rtol=0, err_msg=f"{name} {key}")
        reported = json.loads((tmp_path / f"{name}-rank0.json").read_text())
        assert reported["grad_norm"] == pytest.approx(figures["grad_norm"], rel=1e-5) and figures["grad_norm"] > 1
        assert reported["loss"] == pytest.approx(figures["loss"], rel=1e-5, abs=1e-6)
        tokens = "tokens" if name == "sft" else "trained_tokens"
        assert reported[tokens] == figures[tokens]  # the whole batch's, not rank 0's share


@pytest.mark.slow
@needs_launch
def test_two_rank_sft_run_killed_mid_save_resumes_like_one_process(tmp_path, tiny_model_dir,
                                                                   small_lists_files) -> None:  # noqa: F811
    data = tmp_path / "data"
    data.mkdir()
    conversations = solver_conversations(*small_lists_files, games=4)
    write_jsonl(data / "train.jsonl", conversations[4:])
    write_jsonl(data / "valid.jsonl", conversations[:4])
    args = ["--model", tiny_model_dir, "--data", data, "--lr", "1e-3", "--batch-size", "2", "--iters", "4",
            "--eval-every", "2", "--eval-games", "1", "--save-every", "1", "--quiet"]
    single = tmp_path / "single"
    assert CliRunner().invoke(cli, ["sft", *map(str, args), "--out", str(single)]).exit_code == 0

    (tmp_path / "launch.py").write_text(LAUNCHER)
    out = tmp_path / "two"
    kill_during_save(tmp_path / "saving", "sft", *args, "--out", out)
    assert latest_checkpoint(out).name == "step-0000001"
    result = launch(REPO / "cli.py", "sft", *args, "--out", out, "--resume")
    assert (out / "adapter").is_dir(), result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stdout.count("sft run") == 1  # rank 0 alone prints the summary

    assert sorted(p.name for p in out.iterdir()) == [".lock", "adapter", "checkpoints", "latest", "metrics.jsonl",
                                                     "run.json"]
    one, two = metrics(single), metrics(out)
    assert [r["step"] for r in two] == [r["step"] for r in one] == [0, 1, 2, 3, 4]  # one line per step
    for a, b in zip(one, two):
        for key in ("loss", "val_loss"):
            assert b.get(key) == pytest.approx(a.get(key), abs=1e-4), (a["step"], key)
        assert b.get("tokens") == a.get("tokens") and b.get("eval_games") == a.get("eval_games")
    assert json.loads((out / "run.json").read_text())["processes"] == 2
    expected, resumed = (mx.load(str(p / "adapter" / "adapters.safetensors")) for p in (single, out))
    assert all(np.allclose(np.array(resumed[k]), np.array(expected[k]), atol=1e-4) for k in expected)
    # A 2-process checkpoint is not resumed by one process.
    refused = CliRunner().invoke(cli, ["sft", *map(str, args), "--out", str(out), "--resume"])
    assert refused.exit_code == 2 and "checkpointed by 2 process(es), this one has 1" in refused.output


@pytest.mark.slow
@needs_launch
def test_two_rank_rl_run_killed_mid_save_resumes_exactly(tmp_path, tiny_model_dir, start_adapter) -> None:  # noqa: F811
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(TWO_RANK_RUN))
    args = ["rl", "--model", tiny_model_dir, "--adapter", start_adapter, "--config", config, "--quiet"]
    whole = tmp_path / "whole"
    result = launch(REPO / "cli.py", *args, "--out", whole)
    assert (whole / "adapter").is_dir(), result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stdout.count("RL run") == 1

    (tmp_path / "launch.py").write_text(LAUNCHER)
    out = tmp_path / "killed"
    kill_during_save(tmp_path / "saving", *args, "--out", out)
    assert latest_checkpoint(out).name == "step-0000001"
    launch(REPO / "cli.py", "rl", "--out", out, "--resume", "--quiet")

    assert {p.name for p in out.iterdir()} == {p.name for p in whole.iterdir()} == RL_FILES
    records = metrics(whole)
    assert [(r["step"], r["phase"]) for r in records] == [(0, "heldout"), (1, "ei"), (2, "grpo"), (2, "heldout"),
                                                          (3, "ei"), (3, "heldout")]
    assert [{k: v for k, v in r.items() if k not in TIMING_FIGURES} for r in metrics(out)] == \
        [{k: v for k, v in r.items() if k not in TIMING_FIGURES} for r in records]
    grpo = records[2]  # both ranks' games: one each per round, up to 2 rounds
    assert grpo["games"] in (2, 4) and len(grpo["group_rewards"]) == grpo["groups"]
    assert records[1]["targets"] == 2  # one position per rank
    state = json.loads((latest_checkpoint(out) / "state.json").read_text())["extra"]
    assert len(state["ranks"]) == 2 and state["ranks"][0]["rng"] != state["ranks"][1]["rng"]
    resumed, expected = (mx.load(str(p / "adapter" / "adapters.safetensors")) for p in (out, whole))
    assert all(np.array_equal(np.array(resumed[k]), np.array(expected[k])) for k in expected)


@pytest.mark.slow
@needs_launch
def test_a_step_too_small_to_share_is_a_one_line_error(tmp_path, tiny_model_dir) -> None:  # noqa: F811
    result = launch(REPO / "cli.py", "rl", "--model", tiny_model_dir, "--out", tmp_path / "run", "--games", "1")
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    # Each rank finds the mistake; mlx.launch may stop the second before it prints.
    assert set(errors) == {"error: rollout.games_per_round is 1: too few to share among 2 processes"}, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()
