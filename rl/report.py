"""How an RL run is going: the live view while it trains, and `report RUN` afterwards.

`report` reads RUN/metrics.jsonl and draws the curves that say whether RL is
working — cumulative wins, reward, win rate — as terminal sparklines, and as a PNG
when matplotlib is installed (an optional extra: `pip install matplotlib`).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from sft.run import MetricsLog
from solver.errors import UserError
from solver.progress import progress_bar

SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 60
# (label, key, format) of the figures the live view shows for the latest step.
LIVE_FIGURES = (
    ("reward", "reward_mean", "{:.3f}"), ("reward std", "reward_std", "{:.3f}"), ("win rate", "win_rate", "{:.1%}"),
    ("invalid", "invalid_rate", "{:.1%}"), ("dropped groups", "dropped_fraction", "{:.1%}"),
    ("expert targets", "expert_fraction", "{:.1%}"), ("loss", "loss", "{:.4f}"), ("KL", "kl", "{:.4f}"),
    ("tokens/s", "tokens_per_s", "{:.1f}"), ("seconds", "seconds", "{:.1f}"),
    ("peak memory GB", "peak_memory_gb", "{:.2f}"),
)


class LiveView:
    """A progress bar over steps with the latest step's figures under it."""

    def __init__(self, total: int, done: int, show: bool) -> None:
        self.progress = progress_bar("steps", disable=not show, transient=False)
        self.task = self.progress.add_task("rl", total=total, completed=done)
        self.step_label = "rl"
        self.live = Live(self.progress, refresh_per_second=4, transient=False) if show else None

    def __enter__(self) -> "LiveView":
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)
            if not self.live.console.is_terminal:
                self.live.console.line()  # redirected, the last frame is left without its newline

    def begin(self, step: int, phase: str) -> None:
        self.step_label = f"rl step {step} {phase}"
        self.progress.update(self.task, description=self.step_label)

    def status(self, doing: str) -> None:
        """What the running step is doing now: a step takes minutes on a CPU, and the ETA
        appears only after the first one."""
        self.progress.update(self.task, description=f"{self.step_label}: {doing}")

    def update(self, record: dict) -> None:
        self.progress.update(self.task, advance=1, description=f"rl {record['phase']}")
        if self.live is not None:
            self.live.update(Group(self.progress, step_table(record)))


def step_table(record: dict) -> Table:
    table = Table(title=f"step {record['step']} ({record['phase']})", show_header=False)
    for label, key, pattern in LIVE_FIGURES:
        if record.get(key) is not None:
            table.add_row(label, pattern.format(record[key]))
    return table


def load_metrics(run: str | Path) -> list[dict]:
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{run} is not an RL run folder: it has no metrics.jsonl")
    records = [r for r in MetricsLog(path).records() if isinstance(r, dict) and "phase" in r]
    if not records:
        raise UserError(f"{path} holds no RL steps yet")
    return records


def curves(records: list[dict]) -> dict[str, dict[str, list]]:
    """Series by name, each {"step": [...], "value": [...]}; win figures come from GRPO steps' games."""
    grpo = [r for r in records if r["phase"] == "grpo" and r.get("games")]
    wins, cumulative = 0, []
    for r in grpo:
        wins += r["wins"]
        cumulative.append(wins)
    return {
        "cumulative_wins": {"step": [r["step"] for r in grpo], "value": cumulative},
        "reward_mean": {"step": [r["step"] for r in records], "value": [r["reward_mean"] for r in records]},
        "win_rate": {"step": [r["step"] for r in grpo], "value": [r["win_rate"] for r in grpo]},
    }


def sparkline(values: list[float], width: int = SPARK_WIDTH) -> str:
    """Values squeezed into `width` cells (averaging buckets), drawn with block characters."""
    if not values:
        return ""
    buckets = max(1, min(width, len(values)))
    means = []
    for b in range(buckets):
        chunk = values[b * len(values) // buckets:(b + 1) * len(values) // buckets] or [values[-1]]
        means.append(sum(chunk) / len(chunk))
    low, high = min(means), max(means)
    span = high - low
    return "".join(SPARKS[int((m - low) / span * (len(SPARKS) - 1)) if span > 0 else 0] for m in means)


def report_table(run: str | Path, series: dict[str, dict[str, list]]) -> Table:
    table = Table(title=f"RL run {run}")
    for column in ("curve", "first", "last", "min", "max", "over the steps"):
        table.add_column(column, justify="left" if column in ("curve", "over the steps") else "right")
    for name, data in series.items():
        values = data["value"]
        if not values:
            table.add_row(name, "-", "-", "-", "-", "")
            continue
        table.add_row(name, *(f"{v:.3g}" for v in (values[0], values[-1], min(values), max(values))),
                      sparkline(values))
    return table


def write_png(series: dict[str, dict[str, list]], path: str | Path) -> None:
    try:
        import matplotlib
    except ImportError as err:
        raise UserError("--png needs matplotlib, an optional extra: pip install matplotlib") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from solver.fileio import atomic_write

    figure, axes = plt.subplots(len(series), 1, figsize=(8, 2.6 * len(series)), sharex=True)
    for axis, (name, data) in zip(axes, series.items()):
        axis.plot(data["step"], data["value"], marker="." if len(data["value"]) < 50 else None)
        axis.set_ylabel(name.replace("_", " "))
        axis.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    figure.tight_layout()
    atomic_write(path, lambda tmp: figure.savefig(tmp, format="png", dpi=100))
    plt.close(figure)


def show_report(run: str | Path, console: Console | None = None) -> dict[str, dict[str, list]]:
    series = curves(load_metrics(run))
    (console or Console()).print(report_table(run, series))
    return series
