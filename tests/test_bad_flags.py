"""Flags no run can use are refused in one line before any work: non-finite or out-of-range numbers,
absurd counts, negative seeds, a bad option before the command, a pipeline flag its later stages reject."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli
from llm_fixtures import tiny_model_dir  # noqa: F401
from test_bad_output import assert_one_error

REPO = Path(__file__).parent.parent


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


# Each case names a missing model or data folder too, so a flag that slipped through fails fast
# instead of starting a real run.
@pytest.mark.parametrize("args, message", [
    (["eval", "--model", "/nonexistent", "--temperature", "nan"], "'nan' is not a finite number"),
    (["eval", "--model", "/nonexistent", "--temperature", "inf"], "'inf' is not a finite number"),
    (["eval", "--model", "/nonexistent", "--temperature", "11"], "not in the range 0.0<=x<=10.0"),
    (["eval", "--model", "/nonexistent", "--top-p", "nan"], "'nan' is not a finite number"),
    (["eval", "--model", "/nonexistent", "--seed", "-1"], "--seed"),
    (["gen-sft", "--out", "{tmp}/data", "--answers", "/nonexistent", "--rejected", "nan"], "--rejected"),
    (["gen-sft", "--out", "{tmp}/data", "--answers", "/nonexistent", "--off-policy", "-inf"], "--off-policy"),
    (["gen-sft", "--out", "{tmp}/data", "--answers", "/nonexistent", "--games", "99999999999999999999"],
     "not in the range 1<=x<=100000"),
    (["gen-sft", "--out", "{tmp}/data", "--answers", "/nonexistent", "--seed", "-1"], "--seed"),
    (["sft", "--data", "/nonexistent", "--out", "{tmp}/run", "--lr", "inf"], "'--lr': 'inf' is not a finite number"),
    (["sft", "--data", "/nonexistent", "--out", "{tmp}/run", "--lr", "nan"], "'--lr': 'nan' is not a finite number"),
    (["sft", "--data", "/nonexistent", "--out", "{tmp}/run", "--seed", "-5"], "--seed"),
    (["sft", "--data", "/nonexistent", "--out", "{tmp}/run", "--iters", "99999999999999999999"],
     "not in the range 1<=x<=10000000"),
    (["sft", "--data", "/nonexistent", "--out", "{tmp}/run", "--rank", "99999"], "not in the range 1<=x<=1024"),
    (["rl", "--model", "/nonexistent", "--out", "{tmp}/rl", "--lr", "nan"], "--lr must be a number, got nan"),
    (["rl", "--model", "/nonexistent", "--out", "{tmp}/rl", "--temperature", "inf"], "--temperature must be > 0.0"),
    (["rl", "--model", "/nonexistent", "--out", "{tmp}/rl", "--seed", "99999999999999999999"], "--seed must be"),
    (["pipeline", "--model", "/nonexistent", "--out", "{tmp}/p", "--seed", "-1"], "--seed"),
    (["pipeline", "--model", "/nonexistent", "--out", "{tmp}/p", "--sft-games", "99999999999"],
     "'--sft-games': 99999999999 is not in the range 1<=x<=100000"),
])
def test_unusable_numbers_are_refused(tmp_path, args, message):
    result = run(*(a.format(tmp=tmp_path) for a in args))
    assert_one_error(result, message)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags, message", [
    (["--group-size", "1"], "'--group-size': 1 is not in the range 2<=x<=256"),
    (["--group-size", "1000"], "'--group-size': 1000 is not in the range 2<=x<=256"),
    (["--sft-iters", "0"], "'--sft-iters': 0 is not in the range 1<=x<=10000000"),
    (["--eval-games", "0"], "'--eval-games': 0 is not in the range x>=1"),
    (["--rl-schedule", "grpo:0"], "the step count of 'grpo' must be a whole number >= 1"),
    (["--rl-schedule", "ppo:2"], "unknown phase 'ppo'"),
    (["--ei-replay", "-1"], "'--ei-replay': -1 is not in the range 0<=x<=100000"),
    (["--ei-drill", "243"], "'--ei-drill': 243 is not in the range 0<=x<=242"),
    (["--ei-drill-depth", "6"], "'--ei-drill-depth': 6 is not in the range 1<=x<=5"),
])
def test_pipeline_checks_every_stage_before_the_first(tmp_path, tiny_model_dir, flags, message):  # noqa: F811
    assert_one_error(run("pipeline", "--model", tiny_model_dir, "--out", tmp_path / "p", *flags), message)
    assert not (tmp_path / "p").exists()  # no gen-sft or SFT ran, no folder was made


@pytest.mark.parametrize("model, message", [
    ("{tmp}/missing", "model folder not found"),
    ("{tmp}/empty", "is not a model folder: it has no config.json"),  # beside --out: never inside what it reads
])
def test_pipeline_with_a_missing_model_leaves_no_folder(tmp_path, model, message):
    (tmp_path / "empty").mkdir()
    assert_one_error(run("pipeline", "--model", model.format(tmp=tmp_path), "--out", tmp_path / "p"), message)
    assert not (tmp_path / "p").exists()


def test_bad_option_before_the_command_is_one_line():
    done = subprocess.run([sys.executable, "cli.py", "--bogus", "solve"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert done.stderr == "error: No such option '--bogus'.\n" and done.stdout == ""


def test_unknown_command_is_one_line():
    assert_one_error(run("sovle"), "No such command 'sovle'")


@pytest.mark.parametrize("args, message", [
    (["bench.update", "--model", "/nonexistent", "--steps", "1"], "error: model folder not found: /nonexistent"),
    (["bench.decode", "--batch", "0"], "error: Invalid value for '--batch': 0 is not in the range x>=1."),
    (["bench.rl_step", "--bogus"], "error: No such option"),
])
def test_benchmark_scripts_refuse_bad_input_in_one_line(args, message):
    """The benchmarks run as `python -m` scripts keep the CLI's contract: one line, exit 2."""
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=REPO)
    assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1)
    assert done.stderr.startswith(message), done.stderr
