"""Issue 63, tracebacks: a Ctrl-C, a log line that is not a step and a states file cut short end
as one line, never as Python's traceback (the RL resume's log lines: tests/test_rl.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)
from test_bad_output import assert_one_error
from test_naming_head import tiny_adapter  # noqa: F401  (fixture)
from test_sft import conversations, data_dir, tiny_args  # noqa: F401  (fixtures)

from cli import cli
from common.errors import interrupted
from rl.naming_head import STATES_FILE

REPO = Path(__file__).resolve().parent.parent


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_ctrl_c_while_the_solver_works_is_click_s_one_line(tmp_path):
    """gen-sft interrupted in the solver's compiled code: numba raised SystemError ("returned a
    result with an exception set") from the KeyboardInterrupt, 40 lines; now "Aborted!" as for any
    Ctrl-C, and no --out folder. A fresh cache makes the solver search its opener first (seconds
    of numba), and the signal is sent once that work has begun."""
    cache, out = tmp_path / "cache", tmp_path / "data"
    process = subprocess.Popen([sys.executable, str(REPO / "cli.py"), "gen-sft", "--out", str(out), "--games", "600",
                                "--cold", "--quiet"], cwd=REPO, env={**os.environ, "WORDLE_RL_CACHE": str(cache)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while process.poll() is None and not any(cache.glob("patterns-*.npz")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # into the opener's search
    assert process.poll() is None, "gen-sft ended before it could be interrupted"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1 and stderr.split() == ["Aborted!"], stderr
    assert not out.exists()


def test_ctrl_c_while_the_commands_import_is_click_s_one_line():
    """A Ctrl-C in the seconds cli.py spends importing its commands (mlx, numba) was a traceback
    through importlib; the interrupt is raised here where one of those imports begins."""
    script = ("import runpy, sys\n"
              "class Interrupt:\n"
              "    def find_spec(self, name, path=None, target=None):\n"
              "        if name == 'rl.pipeline_command':\n"
              "            raise KeyboardInterrupt\n"
              "sys.meta_path.insert(0, Interrupt())\n"
              "sys.argv = ['cli.py', '--help']\n"
              "runpy.run_path('cli.py', run_name='__main__')\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and result.stderr.split() == ["Aborted!"], result.stderr
    assert result.stdout == ""


def test_a_system_error_from_a_ctrl_c_is_told_from_any_other():
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as cause:
            raise SystemError("<function> returned a result with an exception set") from cause
    except SystemError as err:
        assert interrupted(err)
    try:  # numba failing again while the first SystemError unwinds (seen in CI): a chain of two
        try:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as cause:
                raise SystemError("<function _numba_unpickle> returned a result with an exception set") from cause
        except SystemError:
            raise SystemError("CPUDispatcher(<function>) returned a result with an exception set")
    except SystemError as err:
        assert interrupted(err)
    assert not interrupted(SystemError("a real bug")) and not interrupted(KeyboardInterrupt())


@pytest.mark.parametrize("line", ['{"note": 1}', "null", "[1, 2]", '{"step": "one"}', "not json"])
def test_a_log_line_that_is_not_a_step_stops_a_resume_and_a_report_in_one_line(tmp_path, tiny_model_dir,  # noqa: F811
                                                                               data_dir, line):  # noqa: F811
    """`sft --out R` again, or `report R`, with a line a user added to R/metrics.jsonl: KeyError: 'step'
    (`{"note": 1}`) and TypeError (`null`) were tracebacks; now one error naming the line. The log
    is left as it was, and a broken last line (a kill mid-write) is still skipped."""
    run_dir = tmp_path / "run"
    args = tiny_args(tiny_model_dir, data_dir, run_dir, "--iters", "2", "--eval-games", "0", "--save-every", "1")
    assert run("sft", *args).exit_code == 0
    log = run_dir / "metrics.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([lines[0], line, *lines[1:]]) + "\n")
    before = log.read_bytes()
    message = f"{log} line 2 is not a step record (an object whose step must be a whole number)"
    assert_one_error(run("sft", *args), message, "remove that line and run again")  # the same command again
    assert_one_error(run("report", run_dir), message)
    assert log.read_bytes() == before

    log.write_text("\n".join(lines) + '\n{"step": 3, "lo')  # killed mid-write: the last line alone is skipped
    assert run("report", run_dir).exit_code == 0


def test_a_states_file_cut_short_is_one_line(tiny_model_dir, tiny_adapter):  # noqa: F811
    states = tiny_adapter / STATES_FILE
    args = ["naming-head", "--model", tiny_model_dir, "--adapter", tiny_adapter, "--positions", 4,
            "--validation-positions", 2, "--epochs", 2, "--rank", 2, "--quiet"]
    assert run(*args).exit_code == 0
    states.write_bytes(states.read_bytes()[:len(states.read_bytes()) // 2])
    assert_one_error(run(*args), f"{states} is not a naming states file (BadZipFile", "delete it to start again")
