"""How an RL run is going: the live view while it trains, and `report RUN` afterwards.

`report` reads RUN/metrics.jsonl and draws the curves that say whether RL is
working — cumulative wins, reward, win rate, and the held-out validation evals
(rl/heldout.py) beside them — as terminal sparklines, and as a PNG when matplotlib
is installed (an optional extra: `pip install matplotlib`). An SFT run folder works
too: its loss, validation loss and held-out evals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from common.errors import UserError
from common.fileio import is_number
from common.progress import progress_bar
from eval.validation import FIGURES as HELD_OUT_FIGURES
from rl.heldout import ENDGAME, PREFIX, is_training_step
from sft.run import MetricsLog

SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 60
# The held-out figures drawn against step, prefixed per run kind: every figure a run logs for its
# held-out games but the game count, the regret and the games lost to invalid answers, so a
# figure added there is drawn here too.
HELD_OUT_CURVES = tuple(name for name in HELD_OUT_FIGURES
                        if name not in ("games", "mean_regret_bits", "lost_to_invalid"))
# The endgame benchmark's rates an RL run logs (rl/heldout.py), drawn when its evals ran.
ENDGAME_CURVES = tuple(ENDGAME + name for name in ("closed_rate", "one_candidate_closed_rate", "repeat_rate",
                                                   "unplayable_rate", "consistent_rate"))
SFT_PREFIX = "eval_"  # sft/run.py's held-out figures
# (label, key, format) of the figures the live view shows for the latest step.
LIVE_FIGURES = (
    ("reward", "reward_mean", "{:.3f}"), ("reward std", "reward_std", "{:.3f}"), ("win rate", "win_rate", "{:.1%}"),
    ("invalid", "invalid_rate", "{:.1%}"), ("dropped groups", "dropped_fraction", "{:.1%}"),
    ("expert targets", "expert_fraction", "{:.1%}"), ("loss", "loss", "{:.4f}"), ("KL", "kl", "{:.4f}"),
    ("tokens/s", "tokens_per_s", "{:.1f}"), ("rollout answer tokens/s", "rollout_tokens_per_s", "{:.1f}"),
    ("update trained tokens/s", "update_tokens_per_s", "{:.1f}"), ("rollout share", "rollout_share", "{:.0%}"),
    ("update padding", "padding_share", "{:.1%}"), ("seconds", "seconds", "{:.1f}"),
    ("peak memory GB", "peak_memory_gb", "{:.2f}"),
)


class LiveView:
    """A progress bar over steps with the latest step's figures under it."""

    def __init__(self, total: int, done: int, show: bool, console: Console | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.progress = progress_bar("steps", disable=not show, transient=False, console=console, clock=clock)
        self.task = self.progress.add_task("rl", total=total, completed=done)
        self.step_label = "rl"
        self.live = (Live(self.progress, console=self.progress.console, refresh_per_second=4, transient=False)
                     if show else None)

    def __enter__(self) -> "LiveView":
        if self.live is not None:
            self.live.__enter__()
        if self.progress.heartbeat is not None:  # not a terminal: plain lines instead of the silent live view
            self.progress.heartbeat.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.progress.heartbeat is not None:
            self.progress.heartbeat.stop()
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
    """The step records of the run folder `run` (MetricsLog's reading), each phase a name."""
    path = Path(run) / "metrics.jsonl"
    if not Path(run).exists():
        raise UserError(f"{run} does not exist: give the --out folder of an rl or sft run")
    if not path.is_file():
        raise UserError(f"{run} is not an RL or SFT run folder: it has no metrics.jsonl")
    records = MetricsLog(path).records()
    if not records:
        raise UserError(f"{path} holds no steps yet")
    for record in records:
        if not isinstance(record.get("phase", ""), str):
            raise UserError(f"{path}: a record's phase must be a name, got step {record['step']!r}, "
                            f"phase {record.get('phase')!r}")
    return records


def is_rl(records: list[dict]) -> bool:
    return any("phase" in r for r in records)


def curves(records: list[dict]) -> dict[str, dict[str, list]]:
    """Series by name, each {"step": [...], "value": [...]}: an RL run's (win figures from GRPO steps'
    games) or an SFT run's, then the held-out evals' if there are any."""
    if not is_rl(records):
        return {"loss": series(records, "loss"), "val_loss": series(records, "val_loss"),
                **heldout_curves(records, SFT_PREFIX)}
    steps = [r for r in records if is_training_step(r)]
    grpo = [r for r in steps if r["phase"] == "grpo" and r.get("games")]
    wins, cumulative = 0, []
    for r in grpo:
        wins += number(r, "wins")
        cumulative.append(wins)
    return {
        "cumulative_wins": {"step": [r["step"] for r in grpo], "value": cumulative},
        "reward_mean": series(steps, "reward_mean"),
        "win_rate": series(grpo, "win_rate"),
        **heldout_curves([r for r in records if not is_training_step(r)], PREFIX),
    }


def series(records: list[dict], key: str) -> dict[str, list]:
    """`key` against step, leaving out records where it is missing or undefined (no wins: no mean guesses)."""
    points = [(r["step"], number(r, key)) for r in records if r.get(key) is not None]
    return {"step": [step for step, _ in points], "value": [value for _, value in points]}


def number(record: dict, key: str) -> float:
    """`record[key]`, which a curve draws: a number, or a one-line error naming the step."""
    value = record[key]
    if not is_number(value):
        raise UserError(f"metrics.jsonl, step {record['step']}: {key} must be a number, got {value!r}")
    return value


def heldout_curves(records: list[dict], prefix: str) -> dict[str, dict[str, list]]:
    names = (HELD_OUT_CURVES if any(prefix + "games" in r for r in records) else ()) + \
        (ENDGAME_CURVES if any(prefix + ENDGAME + "positions" in r for r in records) else ())
    return {prefix + name: series(records, prefix + name) for name in names}


def heldout_note(records: list[dict]) -> str:
    """How the held-out evals played ("32 held-out games at temperature 0.7"), or "" without any."""
    prefix = PREFIX if is_rl(records) else SFT_PREFIX
    # As text: a hand-edited or damaged metrics file may hold any JSON there (a list is unhashable).
    played = {(str(r[prefix + "games"]), str(r.get(prefix + "temperature", "?"))) for r in records
              if prefix + "games" in r}
    answered = {(str(r[prefix + ENDGAME + "positions"]), str(r.get(prefix + ENDGAME + "temperature", "?")))
                for r in records if prefix + ENDGAME + "positions" in r}
    return "; ".join([f"{games} held-out games at temperature {temperature}" for games, temperature in sorted(played)]
                     + [f"{count} held-out endgame positions at temperature {temperature}"
                        for count, temperature in sorted(answered)])


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


def report_table(title: str, series: dict[str, dict[str, list]]) -> Table:
    table = Table(title=title)
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


def write_png(series: dict[str, dict[str, list]], path: str | Path, title: str) -> None:
    """Training curves in the left column, the held-out evals' beside them in the right."""
    try:
        import matplotlib
    except ImportError as err:
        raise UserError("--png needs matplotlib, an optional extra: pip install matplotlib") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.fileio import atomic_write

    held_out = [name for name in series if name.startswith((PREFIX, SFT_PREFIX))]
    columns = [[name for name in series if name not in held_out], held_out]
    columns = [names for names in columns if names]
    rows = max(len(names) for names in columns)
    figure, axes = plt.subplots(rows, len(columns), figsize=(7 * len(columns), 2.4 * rows + 0.6), sharex=True,
                                squeeze=False, layout="constrained")
    for column, names in enumerate(columns):
        for row in range(rows):
            axis = axes[row][column]
            if row >= len(names):
                axis.set_visible(False)
                continue
            data = series[names[row]]
            axis.plot(data["step"], data["value"], marker="." if len(data["value"]) < 50 else None)
            axis.set_ylabel(names[row].replace("_", " "))
            axis.grid(alpha=0.3)
            axis.tick_params(labelbottom=True)
        axes[len(names) - 1][column].set_xlabel("step")
    figure.suptitle(title)
    atomic_write(path, lambda tmp: figure.savefig(tmp, format="png", dpi=100))
    plt.close(figure)


def show_report(run: str | Path, console: Console | None = None) -> tuple[dict[str, dict[str, list]], str]:
    """Print the curves of `run`; returns them and the title that says what they are."""
    records = load_metrics(run)
    note = heldout_note(records)
    title = f"{'RL' if is_rl(records) else 'SFT'} run {run}" + (f" ({note})" if note else "")
    series = curves(records)
    (console or Console()).print(report_table(title, series))
    return series, title
