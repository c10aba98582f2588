"""The project's one progress display: a bar on a terminal, plain lines anywhere else.

On a terminal, rich draws a bar with the description, count, rate, elapsed time and ETA.
Written to a log file, CI or nohup, the same bar prints nothing until it ends (the SFT of
the README's pipeline was 10 silent minutes), so there a heartbeat prints one plain line
at least every `PLAIN_EVERY` seconds instead, from a thread, so that a step that takes
minutes (an RL step, a held-out eval) still shows the run is alive:

    sft loss 1.234 850 tok/s: 12/40 steps, 2.6 s/step, elapsed 0:00:31, ETA 0:01:13

`WORDLE_RL_PROGRESS_EVERY` (seconds) overrides the interval.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from typing import Callable

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.text import Text

from common.errors import note

PLAIN_EVERY = 30.0  # seconds between plain lines when the output is not a terminal
EVERY_ENV = "WORDLE_RL_PROGRESS_EVERY"
ORIGIN = "origin"  # the task field that holds its count when the display began (a resumed run starts past 0)


class RateColumn(ProgressColumn):
    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None:
            return Text(f"- {self.unit}/s", style="progress.data.speed")
        shown = f"{speed:.1f}" if speed < 100 else f"{speed:,.0f}"
        return Text(f"{shown} {self.unit}/s", style="progress.data.speed")


class StageProgress(Progress):
    """A rich progress display that also keeps a heartbeat when its console is not a terminal."""

    def __init__(self, unit: str, *columns, plain_every: float, clock: Callable[[], float] | None = None,
                 **kwargs) -> None:
        super().__init__(*columns, get_time=clock, **kwargs)
        self.unit = unit
        self.heartbeat = None if self.disable or self.console.is_terminal else Heartbeat(self, plain_every)

    def add_task(self, description: str, start: bool = True, total: float | None = 100.0, completed: int = 0,
                 visible: bool = True, **fields) -> TaskID:
        return super().add_task(description, start, total, completed, visible, **{ORIGIN: completed, **fields})

    def update(self, task_id: TaskID, **changes) -> None:
        super().update(task_id, **changes)
        if self.heartbeat is not None:
            self.heartbeat.beat()

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        if self.heartbeat is not None:
            self.heartbeat.beat()

    def start(self) -> None:
        super().start()
        if self.heartbeat is not None:
            self.heartbeat.start()

    def stop(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
        super().stop()


class Heartbeat:
    """Plain lines, one per visible task, whenever `every` seconds have passed since the last ones.

    `beat()` runs on every update and from a background thread between them; the
    clock is the progress display's, so a test can drive it by hand.
    """

    def __init__(self, progress: StageProgress, every: float) -> None:
        self.progress, self.every = progress, every
        self.last = progress.get_time()
        self.lines = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="progress-heartbeat", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread; a run that printed lines gets a last one with its final count."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.lines:
            with self._lock:
                self._emit()

    def beat(self) -> None:
        with self._lock:
            if self.progress.get_time() - self.last >= self.every:
                self._emit()

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, max(self.every, 0.01))):
            self.beat()

    def _emit(self) -> None:
        self.last = self.progress.get_time()
        for task in self.progress.tasks:
            if task.visible:
                self.progress.console.print(plain_line(task, self.progress.unit), markup=False, highlight=False,
                                            emoji=False, soft_wrap=True)
                self.lines += 1


def plain_line(task: Task, unit: str) -> str:
    """`description: done/total unit, rate, elapsed, ETA`, the rate measured over this display's own work."""
    elapsed = task.elapsed or 0.0
    done = task.completed - task.fields.get(ORIGIN, 0)
    rate = done / elapsed if done > 0 and elapsed > 0 else None
    count = f"{task.completed:g}/{task.total:g}" if task.total is not None else f"{task.completed:g}"
    if rate is None:
        speed = f"- {unit}/s"
    elif rate >= 1:
        speed = f"{rate:,.1f} {unit}/s"
    else:
        speed = f"{1 / rate:,.1f} s/{unit.rstrip('s')}"
    left = task.total - task.completed if task.total is not None else None
    eta = _clock_time(left / rate) if rate is not None and left is not None else "-"
    return f"{task.description}: {count} {unit}, {speed}, elapsed {_clock_time(elapsed)}, ETA {eta}"


def _clock_time(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def plain_every() -> float:
    """The heartbeat interval: `WORDLE_RL_PROGRESS_EVERY` seconds when set, else 30. cli.py asks
    before any work, so that a value that is not a finite number of seconds above 0 gets its note
    at the start of the log (0 or less would print a line at every update)."""
    return _interval(os.environ.get(EVERY_ENV, "").strip())


@functools.lru_cache(maxsize=None)
def _interval(raw: str) -> float:
    """`raw` as seconds; a value it cannot be is one note (once: every progress bar asks again), and 30.
    It was an error, and then every command failed on it, `--help` and those without a bar too."""
    if not raw:
        return PLAIN_EVERY
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        note(f"{EVERY_ENV} must be a number of seconds above 0 (e.g. 5), got {raw!r}: plain progress lines come "
             f"every {PLAIN_EVERY:g} s")
        return PLAIN_EVERY
    return seconds


def progress_bar(unit: str, disable: bool = False, transient: bool = True, console: Console | None = None,
                 clock: Callable[[], float] | None = None) -> StageProgress:
    return StageProgress(unit, TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                         RateColumn(unit), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                         plain_every=plain_every(), clock=clock or time.monotonic, console=console, disable=disable,
                         transient=transient)
