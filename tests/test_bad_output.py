"""Outputs that cannot be written: one `error:` line and exit 2 before any work, nothing left half-made;
devices, FIFOs and symlinks written through, never replaced; new files following the umask."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli
from common.errors import UserError
from common.fileio import atomic_replace_dir, atomic_write_json



def _chmod_denies() -> bool:
    """False as root (with CAP_DAC_OVERRIDE), where a folder's mode does not stop its owner writing."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o555)
        try:
            Path(folder, "probe").write_text("x")
        except PermissionError:
            return True
        finally:
            os.chmod(folder, 0o755)
    return False


CHMOD_DENIES = _chmod_denies()


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def assert_one_error(result, *fragments: str) -> str:
    """Exit 2 and exactly one line on stderr, `error: ...` holding every fragment; no traceback."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def commands_writing_json(tmp: Path) -> dict[str, list]:
    """Each command with arguments that would fail fast (missing model or data) if the check let it start."""
    return {
        "solve": ["solve", "--word", "crane"],
        "matrix": ["matrix", "--repeat", "1"],
        "eval": ["eval", "--games", "1", "--quiet"],
        "doctor": ["doctor"],
        "gen-sft": ["gen-sft", "--out", tmp / "data", "--games", "1", "--quiet"],
        "sft": ["sft", "--data", tmp / "no-data", "--out", tmp / "sft"],
        "rl": ["rl", "--model", tmp / "no-model", "--out", tmp / "rl"],
        "report": ["report", tmp],
        "pipeline": ["pipeline", "--model", tmp / "no-model", "--out", tmp / "pipeline"],
    }


@pytest.mark.parametrize("command", list(commands_writing_json(Path("."))))
def test_json_under_a_file_is_refused_before_any_work(tmp_path, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    args = commands_writing_json(tmp_path)[command]
    assert_one_error(run(*args, "--json", blocker / "out.json"), "--json", "a-file is not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no run folder, no data


@pytest.mark.skipif(not CHMOD_DENIES, reason="root writes into a folder whatever its mode")
@pytest.mark.parametrize("command", list(commands_writing_json(Path("."))))
def test_json_in_a_folder_without_permission_is_refused(tmp_path, command):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        args = commands_writing_json(tmp_path)[command]
        assert_one_error(run(*args, "--json", locked / "out.json"), "no permission to write in")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["locked"]
    finally:
        locked.chmod(0o755)


@pytest.mark.skipif(not CHMOD_DENIES, reason="root writes into a folder whatever its mode")
@pytest.mark.parametrize("command", ["gen-sft", "sft", "rl", "pipeline"])
def test_out_in_a_folder_without_permission_is_refused(tmp_path, command):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        args = [locked / "run" if isinstance(a, Path) and a.name in ("data", "sft", "rl", "pipeline") else a
                for a in commands_writing_json(tmp_path)[command]]
        assert_one_error(run(*args), "--out", "no permission to write in")
        assert not any(locked.iterdir())
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize("command", ["gen-sft", "sft", "rl", "pipeline"])
def test_out_under_a_file_is_refused(tmp_path, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    args = [blocker / "run" if isinstance(a, Path) and a.name in ("data", "sft", "rl", "pipeline") else a
            for a in commands_writing_json(tmp_path)[command]]
    assert_one_error(run(*args), "--out", "a-file is not a folder")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a disk that is always full)")
def test_json_onto_a_full_disk_is_one_line():
    result = run("solve", "--word", "crane", "--json", "/dev/full")
    assert_one_error(result, "cannot write /dev/full", "No space left on device")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


@pytest.mark.skipif(not os.path.isfile("/proc/version"), reason="needs Linux's /proc")
def test_a_write_error_names_the_users_file_not_our_temp_file():
    """/proc/version passes the early check (a file in a folder root may write to) but no file can
    be made beside it: the error shows the user's path, not `.version.<random>.tmp`."""
    line = assert_one_error(run("solve", "--word", "crane", "--json", "/proc/version"),
                            "cannot write /proc/version: no file can be made in /proc")
    assert ".tmp" not in line


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_json_onto_dev_null_writes_through_it():
    result = run("solve", "--word", "crane", "--json", "/dev/null")
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # as root, a replace would have made it a file


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_json_onto_a_fifo_writes_through_it(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    result = run("solve", "--word", "crane", "--json", fifo)
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(received[0])["secret"] == "crane"


def test_json_onto_a_symlink_replaces_its_target_not_the_link(tmp_path):
    target = tmp_path / "results" / "game.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    result = run("solve", "--word", "crane", "--json", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["secret"] == "crane"
    assert sorted(p.name for p in target.parent.iterdir()) == ["game.json"]  # no temp file left


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_and_folders_follow_the_umask(tmp_path, umask, mode):
    before = os.umask(umask)
    try:
        atomic_write_json(tmp_path / "new.json", {"a": 1})
        atomic_replace_dir(tmp_path / "folder", lambda build: (build / "x").write_text("x"))
    finally:
        os.umask(before)
    assert stat.S_IMODE(os.stat(tmp_path / "new.json").st_mode) == mode
    assert stat.S_IMODE(os.stat(tmp_path / "folder").st_mode) == mode | (0o111 & ~umask)


def test_a_replaced_file_keeps_its_mode(tmp_path):
    path = tmp_path / "shared.json"
    path.write_text("{}")
    path.chmod(0o640)
    atomic_write_json(path, {"a": 1})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640 and json.loads(path.read_text()) == {"a": 1}


def test_a_failed_write_leaves_no_temp_file(tmp_path):
    def fail(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise OSError(28, "No space left on device")

    with pytest.raises(UserError, match="cannot write .*folder: No space left on device"):
        atomic_replace_dir(tmp_path / "folder", fail)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("out", [".", ".."])
def test_gen_sft_refuses_to_replace_the_folder_it_runs_in(tmp_path, monkeypatch, out):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert_one_error(run("gen-sft", "--out", out, "--games", "1", "--quiet", "--overwrite"),
                     "is the folder you are in")
    assert work.is_dir() and list(tmp_path.iterdir()) == [work]


@pytest.mark.parametrize("free_bytes_counted_full, error", [(1 << 62, UserError), (0, RuntimeError)])
def test_a_library_failing_on_a_full_disk_is_one_line(tmp_path, monkeypatch, free_bytes_counted_full, error):
    """mlx's safetensors writer says `RuntimeError: [write] Unable to write` when the disk is full;
    on a full disk that is the user's to fix, elsewhere it is a bug and keeps its traceback."""
    def build(folder: Path) -> None:
        raise RuntimeError("[write] Unable to write 1783 bytes to file.")

    monkeypatch.setattr("common.fileio.FULL_BELOW", free_bytes_counted_full)
    with pytest.raises(error) as raised:
        atomic_replace_dir(tmp_path / "checkpoint", build)
    if error is UserError:
        assert str(raised.value) == f"cannot write {tmp_path / 'checkpoint'}: no space left on the device"
    assert list(tmp_path.iterdir()) == []
