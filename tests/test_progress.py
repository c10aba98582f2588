"""Progress when nobody watches: plain lines at least every 30 s when the output is not a terminal."""

from __future__ import annotations

import io
import time

from click.testing import CliRunner
from rich.console import Console

from cli import cli
from common.progress import EVERY_ENV, plain_line, progress_bar
from rl.report import LiveView


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def redirected() -> tuple[Console, io.StringIO]:
    stream = io.StringIO()
    return Console(file=stream, force_terminal=False, width=60), stream


def test_plain_lines_every_30_seconds_with_count_rate_and_eta():
    console, stream = redirected()
    clock = FakeClock()
    progress = progress_bar("steps", console=console, clock=clock)
    task = progress.add_task("sft", total=40, completed=10)  # a resumed run: 10 steps were done before
    for _ in range(5):
        clock.now += 5.0
        progress.advance(task)
    assert stream.getvalue() == ""  # 25 s: nothing yet
    clock.now += 5.0
    progress.update(task, advance=1, description="sft loss 1.234")
    # 6 steps of this run in 30 s: 5 s a step, 24 left.
    assert stream.getvalue() == "sft loss 1.234: 16/40 steps, 5.0 s/step, elapsed 0:00:30, ETA 0:02:00\n"
    clock.now += 29.0
    progress.advance(task)
    assert stream.getvalue().count("\n") == 1  # the next one waits another 30 s
    clock.now += 1.0
    progress.advance(task)
    assert stream.getvalue().splitlines()[-1].startswith("sft loss 1.234: 18/40 steps, 7.5 s/step")


def test_fast_stages_show_a_rate_per_second_and_a_terminal_gets_the_bar_only():
    clock = FakeClock()
    progress = progress_bar("games", console=redirected()[0], clock=clock)
    task = progress.add_task("solver", total=2315)
    clock.now += 4.0
    progress.advance(task, 1000)
    assert plain_line(progress.tasks[0], "games") == ("solver: 1000/2315 games, 250.0 games/s, elapsed 0:00:04, "
                                                      "ETA 0:00:05")
    terminal = Console(file=io.StringIO(), force_terminal=True)
    assert progress_bar("games", console=terminal).heartbeat is None
    assert progress_bar("games", console=redirected()[0], disable=True).heartbeat is None  # --quiet


def test_a_step_that_takes_minutes_still_prints_from_the_thread(monkeypatch):
    monkeypatch.setenv(EVERY_ENV, "0.01")
    console, stream = redirected()
    progress = progress_bar("steps", console=console)
    progress.add_task("rl step 1 grpo: round 1, 0/4 groups", total=4)
    with progress:  # no update at all while the step runs
        deadline = time.monotonic() + 10
        while "rl step 1" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "rl step 1 grpo: round 1, 0/4 groups: 0/4 steps, - steps/s" in stream.getvalue()


def test_rl_live_view_redirected_says_what_the_step_does():
    console, stream = redirected()
    clock = FakeClock()
    view = LiveView(total=4, done=1, show=True, console=console, clock=clock)
    view.begin(2, "grpo")
    clock.now += 31.0
    view.status("held-out eval, 16 games")
    assert stream.getvalue() == ("rl step 2 grpo: held-out eval, 16 games: 1/4 steps, - steps/s, "
                                 "elapsed 0:00:31, ETA -\n")


def test_a_command_writing_to_a_log_prints_progress_lines(monkeypatch, tmp_path):
    monkeypatch.setenv(EVERY_ENV, "0.001")
    result = CliRunner().invoke(cli, ["eval", "--policy", "solver", "--games", "5", "--seed", "1",
                                      "--json", str(tmp_path / "eval.json")])
    assert result.exit_code == 0, result.output
    assert "turns/s, elapsed 0:00:0" in result.output and "5/5 games over: 30/30 turns" in result.output
