"""Every command that writes into --out takes the folder's lock (gen-sft --overwrite too) and refuses a
non-empty folder that holds another command's output, before writing anything there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli
from common.errors import UserError
from common.run_lock import run_lock
from sft.run_folder import claim
from test_bad_output import assert_one_error

REPO = Path(__file__).resolve().parent.parent


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"" for p in sorted(folder.rglob("*"))}


def sft_run(folder: Path) -> Path:
    """What an SFT run leaves: its record, a checkpoint and the pointer to it."""
    (folder / "checkpoints" / "step-0000002").mkdir(parents=True)
    (folder / "latest").write_text("step-0000002\n")
    (folder / "run.json").write_text(json.dumps({"model": "default", "trajectory": {}}))
    return folder


def dataset(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text('{"messages": []}\n')
    (folder / "manifest.json").write_text("{}")
    return folder


def test_gen_sft_overwrite_waits_for_the_run_that_holds_the_folder(tmp_path):
    out = sft_run(tmp_path / "run")
    before = listing(out)
    with run_lock(out):
        assert_one_error(run("gen-sft", "--out", out, "--games", 2, "--quiet", "--overwrite"),
                         f"{out} is in use by another run")
        assert listing(out) == {**before, ".lock": f"{os.getpid()}\n".encode()}  # the live run's files stay


@pytest.mark.parametrize("command", [
    ["gen-sft", "--games", "2", "--quiet", "--overwrite"],
    ["rl", "--model", "unused"],
    ["pipeline", "--model", "unused"],
])
def test_other_commands_refuse_an_sft_run(tmp_path, command):
    out = sft_run(tmp_path / "run")
    before = listing(out)
    assert_one_error(run(*command, "--out", out), f"--out {out} holds an SFT run, not ")
    assert listing(out) == before  # not even a lock file is left behind


def notes(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text("mine")
    return folder


@pytest.mark.parametrize("make, held", [(dataset, "a gen-sft dataset"), (notes, "other files (a.txt)")])
@pytest.mark.parametrize("command, label", [
    (["sft", "--model", "unused", "--data", "{data}"], "an SFT run"),
    (["rl", "--model", "unused"], "an RL run"),
    (["pipeline", "--model", "unused"], "a pipeline run"),
])
def test_runs_refuse_a_dataset_or_a_folder_of_other_files(tmp_path, command, label, make, held):
    out = make(tmp_path / "out")
    before = listing(out)
    data = dataset(tmp_path / "data")  # sft's own --data: --out is never the folder it reads
    result = run(*(a.format(data=data) for a in command), "--out", out)
    assert_one_error(result, f"--out {out} holds {held}, not {label}: choose another --out")
    assert listing(out) == before


def test_gen_sft_keeps_its_own_rule_for_its_own_datasets(tmp_path):
    out = dataset(tmp_path / "data")
    assert_one_error(run("gen-sft", "--out", out, "--games", 2, "--quiet"), "pass --overwrite to replace it")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    assert_one_error(run("gen-sft", "--out", tmp_path / "notes", "--games", 2, "--quiet", "--overwrite"),
                     "holds other files (a.txt), not a gen-sft dataset")


def test_a_folder_is_claimed_by_its_own_kind_or_when_empty(tmp_path):
    out = sft_run(tmp_path / "run")
    (out / ".lock").write_text("")
    (out / ".latest.abc12345.tmp").write_text("")  # what a killed write leaves
    claim(out, "sft")
    claim(tmp_path / "missing", "rl")
    (tmp_path / "empty").mkdir()
    claim(tmp_path / "empty", "pipeline")
    with pytest.raises(UserError, match="holds an SFT run, not an RL run"):
        claim(out, "rl")


def test_gen_sft_on_a_two_word_list_finishes(tmp_path):
    """The careless stand-in once looked forever for another word when there was none (issue 37 item 3)."""
    words = tmp_path / "two.txt"
    words.write_text("crane\nslate\n")
    result = subprocess.run([sys.executable, str(REPO / "cli.py"), "gen-sft", "--out", str(tmp_path / "g"),
                             "--games", "5", "--answers", str(words), "--allowed", str(words), "--quiet"],
                            cwd=REPO, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "WORDLE_RL_NO_BLAS_FIX": "1"})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "g" / "manifest.json").is_file()
