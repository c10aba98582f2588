"""One run per --out folder (per --adapter for naming-head): a second sft, rl, pipeline or naming-head refuses in
one line; a killed run leaves no stuck lock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli
from common.errors import UserError
from common.fileio import remove_leftovers
from common.run_lock import LOCK_FILE, run_lock

REPO = Path(__file__).resolve().parent.parent
HOLD = """
import sys, time
from common.run_lock import run_lock
with run_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


def one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.mark.parametrize("command", [
    ["sft", "--model", "unused", "--data", "unused"],
    ["rl", "--model", "unused"],
    ["pipeline", "--model", "unused"],
])
def test_a_second_run_on_the_same_folder_refuses(tmp_path, command):
    out = tmp_path / "run"
    with run_lock(out):
        result = CliRunner().invoke(cli, [*command, "--out", str(out)])
    assert one_error_line(result) == (f"error: {out} is in use by another run (pid {os.getpid()}); "
                                      "wait for it to end or choose another --out")


def test_a_second_naming_head_on_the_same_adapter_refuses(tmp_path):
    """Issue 85: two fits on one adapter at once both exited 0 and the folder kept the head of
    whichever ended last; naming-head takes the lock of its --adapter folder, as sft its --out."""
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapters.safetensors").write_bytes(b"")
    with run_lock(adapter):
        result = CliRunner().invoke(cli, ["naming-head", "--model", "unused", "--adapter", str(adapter)])
    assert one_error_line(result) == (f"error: {adapter} is in use by another run (pid {os.getpid()}); "
                                      "wait for it to end or choose another --adapter")
    assert sorted(p.name for p in adapter.iterdir()) == [LOCK_FILE, "adapters.safetensors"]


def test_a_killed_run_leaves_no_stuck_lock(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=REPO, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    assert holder.stdout.readline() == b"locked\n"
    with pytest.raises(UserError, match=f"in use by another run \\(pid {holder.pid}\\)"):
        with run_lock(out):
            pass
    holder.kill()  # SIGKILL: no cleanup code runs
    holder.wait()
    assert (out / LOCK_FILE).is_file()
    with run_lock(out):  # the OS released the lock with the process
        (out / "metrics.jsonl").write_text("")
    assert (out / LOCK_FILE).is_file()  # kept: the folder holds a run


def test_a_run_that_stops_before_writing_leaves_no_folder(tmp_path):
    out = tmp_path / "new" / "run"
    result = CliRunner().invoke(cli, ["pipeline", "--model", str(tmp_path / "missing"), "--out", str(out)])
    assert result.exit_code == 2 and result.output.splitlines()[-1].startswith("error: model folder not found")
    assert not out.exists()


def test_leftovers_of_killed_atomic_writes_are_cleared_or_put_back(tmp_path):
    for name in ("adapter", "best", "notes.txt"):
        (tmp_path / name).mkdir() if "." not in name else (tmp_path / name).write_text("mine")
    for name in (".adapter.k3j4h5g6", ".adapter.old", ".best.old", ".start_adapter.a_b1c2d3"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapters.safetensors").write_text("x")
    for name in (".latest.abc12345.tmp", ".metrics.jsonl.zz11yy22.tmp", ".hidden", LOCK_FILE, ".notes.old",
                 ".notes.abcd1234"):  # the last two are files: not what our writes leave
        (tmp_path / name).write_text("x")
    (tmp_path / "best").rmdir()  # killed between the swap's two renames: RUN/best is gone, .best.old is whole
    assert remove_leftovers(tmp_path) == [".adapter.k3j4h5g6", ".adapter.old", ".latest.abc12345.tmp",
                                          ".metrics.jsonl.zz11yy22.tmp", ".start_adapter.a_b1c2d3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", LOCK_FILE, ".notes.abcd1234", ".notes.old",
                                                          "adapter", "best", "notes.txt"]
    assert (tmp_path / "best" / "adapters.safetensors").read_text() == "x"
