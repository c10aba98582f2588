"""Rich tables for eval results, and the side-by-side comparison of two runs."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from eval.paired import paired_rates, paired_wins
from solver.errors import UserError
from solver.fileio import read_json

BAR_WIDTH = 30
HISTOGRAM_KEYS = ("1", "2", "3", "4", "5", "6", "X")
# (label, key, format) of the figures shown for a run; None values show as "-".
FIGURES = (
    ("games", "games", "{:d}"),
    ("wins", "wins", "{:d}"),
    ("win rate", "win_rate", "{:.1%}"),
    ("mean guesses (wins)", "mean_guesses", "{:.4f}"),
    ("mean guesses (a loss = 7)", "mean_guesses_loss_as_7", "{:.4f}"),
    ("max guesses", "max_guesses", "{:d}"),
    ("failures", "failures", "{:d}"),
    ("format-valid rate", "format_valid_rate", "{:.1%}"),
    ("invalid-word rate", "invalid_word_rate", "{:.1%}"),
    ("repeat rate", "repeat_rate", "{:.1%}"),
    ("refused word again", "refused_again_rate", "{:.1%}"),
    ("consistency rate", "consistency_rate", "{:.1%}"),
    ("consistency after the opener", "later_consistency_rate", "{:.1%}"),
    ("mean regret (bits)", "mean_regret_bits", "{:.3f}"),
    ("mean regret (expected left)", "mean_regret_expected_left", "{:.2f}"),
    ("seconds", "seconds", "{:.2f}"),
    ("setup seconds (kernels, opener)", "setup_seconds", "{:.2f}"),
    ("games/s", "games_per_second", "{:.2f}"),
)


def _fmt(value, pattern: str) -> str:
    if value is None:
        return "-"
    return pattern.format(value)


def histogram(result: dict) -> Table:
    counts = result["histogram"]
    peak = max(counts.values()) or 1
    table = Table(title="guesses needed", show_header=False, box=None)
    for key in HISTOGRAM_KEYS:
        n = counts.get(key, 0)
        bar = Text("█" * round(BAR_WIDTH * n / peak), style="red" if key == "X" else "green")
        table.add_row(key, bar, str(n))
    return table


def result_table(result: dict) -> Table:
    table = Table(title=f"{result.get('policy', 'eval')} on {result.get('secrets', '?')} "
                        f"({result.get('split', 'all')})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for label, key, pattern in FIGURES:
        table.add_row(label, _fmt(result.get(key), pattern))
    return table


def show_result(result: dict, console: Console | None = None) -> None:
    (console or Console()).print(Group(result_table(result), histogram(result)))


def load_result(path: str) -> dict:
    """An eval JSON file, checked to hold what the tables show (of the right types)."""
    data = read_json(path, "eval result")
    if "histogram" not in data or "games" not in data:
        raise UserError(f"{path} is not an eval result (no games/histogram)")
    for _, key, pattern in FIGURES:
        value = data.get(key)
        integer = pattern == "{:d}"
        if value is not None and not is_number(value, integer):
            raise UserError(f"{path}: {key} must be {'a whole number' if integer else 'a number'}, got {value!r}")
    counts = data["histogram"]
    if not isinstance(counts, dict) or not all(is_number(n, integer=True) for n in counts.values()):
        raise UserError(f"{path}: histogram must map guesses to whole numbers of games")
    games = data.get("per_game", [])
    if not isinstance(games, list) or not all(isinstance(g, dict) and isinstance(g.get("secret"), str)
                                              and isinstance(g.get("won"), bool) for g in games):
        raise UserError(f"{path}: per_game must list games, each with a secret and won: true/false")
    return data


def is_number(value, integer: bool = False) -> bool:
    """A JSON number (true/false are not), a whole one if `integer`."""
    return isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)


def compare_table(a: dict, b: dict, name_a: str, name_b: str) -> Table:
    table = Table(title=f"{name_a} vs {name_b}")
    table.add_column("figure")
    table.add_column(name_a, justify="right")
    table.add_column(name_b, justify="right")
    for label, key, pattern in FIGURES:
        table.add_row(label, _fmt(a.get(key), pattern), _fmt(b.get(key), pattern))
    for key in HISTOGRAM_KEYS:
        table.add_row(f"solved in {key}" if key != "X" else "not solved",
                      str(a["histogram"].get(key, 0)), str(b["histogram"].get(key, 0)))
    paired = paired_wins(a, b)
    if paired.games:
        table.add_row("same secrets: games", str(paired.games), str(paired.games))
        table.add_row("same secrets: wins", str(paired.wins_a), str(paired.wins_b))
        table.add_row("won here only (paired)", str(paired.only_a), str(paired.only_b))
        table.add_row("sign test p, wins", f"{paired.p_value:.3f}", "")
    labels = {key: label for label, key, _ in FIGURES}
    rates = [rate for rate in paired_rates(a, b) if rate.difference is not None]
    if rates:
        table.add_row("change, right - left", f"{rates[0].games} secrets", "points [95% interval]")
    for rate in rates:
        table.add_row(f"  {labels[rate.figure]}", "",
                      f"{100 * rate.difference:+.1f} [{100 * rate.low:+.1f}, {100 * rate.high:+.1f}]")
    return table
