"""The project's one progress bar: description, bar, count, rate, elapsed and ETA."""

from __future__ import annotations

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.text import Text


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


def progress_bar(unit: str, disable: bool = False, transient: bool = True) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    RateColumn(unit), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    disable=disable, transient=transient)
