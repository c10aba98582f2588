"""Rich tables for eval results, and the side-by-side comparison of two runs."""

from __future__ import annotations

import json
import math

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from common.errors import UserError
from common.fileio import atomic_write_json, is_number, read_json
from eval.endgame import KIND, OUTCOMES, RATES, answer_fit, keyed_records, outcome_counts
from eval.paired import improvement_verdict, paired_changes, paired_rates, paired_wins, sign_test_p

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
    ("lost with 1 candidate left", "lost_one_left", "{:d}"),
    ("lost with 2-6 left", "lost_two_to_six_left", "{:d}"),
    ("lost with 7+ left", "lost_seven_or_more_left", "{:d}"),
    ("games lost to 3 unplayable answers", "lost_to_invalid", "{:d}"),
    ("games down to 1 candidate", "reached_one_left", "{:d}"),
    ("  won with the next guess", "closed_from_one_left", "{:d}"),
    ("mean regret (bits)", "mean_regret_bits", "{:.3f}"),
    ("mean regret (expected left)", "mean_regret_expected_left", "{:.2f}"),
    ("seconds", "seconds", "{:.2f}"),
    ("setup seconds (model; solver: kernels, opener)", "setup_seconds", "{:.2f}"),
    ("games/s", "games_per_second", "{:.2f}"),
)


def _fmt(value, pattern: str) -> str:
    if value is None:
        return "-"
    return pattern.format(value)


def histogram(result: dict) -> Table:
    """Games by guesses needed; for a model, the solver's count on the same secrets beside."""
    counts = result["histogram"]
    solver = (result.get("solver_same_secrets") or {}).get("histogram")
    peak = max(counts.values()) or 1
    table = Table(title="guesses needed" + (" (the solver on the same secrets at right)" if solver else ""),
                  show_header=False, box=None)
    for key in HISTOGRAM_KEYS:
        n = counts.get(key, 0)
        bar = Text("█" * round(BAR_WIDTH * n / peak), style="red" if key == "X" else "green")
        table.add_row(key, bar, str(n), *([f"solver {solver.get(key, 0)}"] if solver else []))
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
    """An eval JSON file (whole games, or the endgame benchmark), checked to hold what the
    tables show (of the right types)."""
    data = read_json(path, "eval result")
    if data.get("kind") == KIND:
        return _checked_endgame(path, data)
    if "histogram" not in data or "games" not in data:
        raise UserError(f"{path} is not an eval result (no games/histogram)")
    for _, key, pattern in FIGURES:
        value = data.get(key)
        integer = pattern == "{:d}"
        if value is not None and not is_number(value, integer):
            raise UserError(f"{path}: {key} must be {'a whole number' if integer else 'a number'}, got {value!r}")
        if value is not None and not math.isfinite(value):
            raise UserError(f"{path}: {key} is {json.dumps(value)}, not a figure: the file is damaged; play the eval "
                            "again")
    counts = data["histogram"]
    if not isinstance(counts, dict) or not all(is_number(n, integer=True) for n in counts.values()):
        raise UserError(f"{path}: histogram must map guesses to whole numbers of games")
    games = data.get("per_game", [])
    if not isinstance(games, list) or not all(isinstance(g, dict) and isinstance(g.get("secret"), str)
                                              and isinstance(g.get("won"), bool) for g in games):
        raise UserError(f"{path}: per_game must list games, each with a secret and won: true/false")
    return data


def _checked_endgame(path: str, data: dict) -> dict:
    records = data.get("per_position")
    if not isinstance(records, list) or not all(
            isinstance(r, dict) and isinstance(r.get("key"), str) and is_number(r.get("candidates"), integer=True)
            and all(isinstance(r.get(name), bool) for name in OUTCOMES if name != "refused_again")
            and isinstance(r.get("refused_again"), (bool, type(None)))
            and (r["unplayable"] or isinstance(r.get("guess"), str)) for r in records):
        raise UserError(f"{path}: per_position must list positions, each with a key, candidates and its outcomes")
    for record in records:
        try:
            answer_fit(record)
        except (ValueError, IndexError, UserError):
            raise UserError(f"{path}: position key {record['key']!r} does not list its turns as guess=tiles") from None
    return data


def compare_games(a: dict, b: dict, name_a: str, name_b: str, json_path: str | None = None,
                  console: Console | None = None) -> dict:
    """Two whole-game evals side by side, paired by secret, and the verdict on B against A; refused
    when they share no secret (nothing would be paired, and a verdict of nothing is no answer)."""
    paired = paired_wins(a, b)
    if not paired.games:
        raise UserError(f"--compare: {name_a} and {name_b} share no secret (another --split, --seed or --games?): "
                        "compare evals played on the same secrets")
    verdict = improvement_verdict(a, b)
    console = console or Console()
    console.print(compare_table(a, b, name_a, name_b))
    console.print(verdict.line(name_a, name_b), markup=False, highlight=False)
    written = {"a": name_a, "b": name_b, "paired_wins": paired.to_json(),
               "paired_rates": [rate.to_json() for rate in paired_rates(a, b)], "verdict": verdict.to_json()}
    if json_path:
        atomic_write_json(json_path, written)
    return written


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
        table.add_row(f"  {labels[rate.figure]}", "", rate.shown())
    return table


ENDGAME_LABELS = {
    "closed_rate": "closing rate (names the secret)", "repeat_rate": "repeats an earlier guess",
    "repeat_last_rate": "repeats the last guess", "refused_again_rate": "refused word again",
    "unplayable_rate": "unplayable", "consistent_rate": "playable and fits the clues",
    "one_candidate_closed_rate": "1 left: closing rate", "one_candidate_repeat_rate": "1 left: repeats",
    "one_candidate_repeat_last_rate": "1 left: repeats the last guess",
    "one_candidate_unplayable_rate": "1 left: unplayable",
    "fit_rate": "share of clue tiles kept (playable)", "one_candidate_fit_rate": "1 left: share of clue tiles kept",
}


def show_endgame(result: dict, console: Console | None = None) -> None:
    """The endgame benchmark's rates, then its closing rate by candidates left."""
    table = Table(title=f"{result.get('policy', 'model')} endgame, {result.get('split')} "
                        f"({result.get('source')}), sampled at {result.get('temperature')}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("positions", str(result["positions"]))
    table.add_row("with 1 candidate left", str(result["one_candidate_positions"]))
    for rate in RATES:
        table.add_row(ENDGAME_LABELS[rate], _fmt(result.get(rate), "{:.1%}"))
    for n, row in result.get("by_candidates", {}).items():
        table.add_row(f"closing rate, {n} left ({row['positions']})", _fmt(row["closing_rate"], "{:.1%}"))
    table.add_row("seconds", _fmt(result.get("seconds"), "{:.1f}"))
    (console or Console()).print(table)


def compare_endgame(a: dict, b: dict, name_a: str, name_b: str, json_path: str | None = None,
                    console: Console | None = None) -> dict:
    """Two endgame runs paired by position: each rate's change with a 95% bootstrap interval over
    the shared positions, and the exact sign test on the positions only one side closed."""
    if a.get("kind") != KIND or b.get("kind") != KIND:
        raise UserError("--compare: both files must be endgame results (eval --endgame), or neither")
    records_a, records_b = keyed_records(a), keyed_records(b)
    shared = sorted(records_a.keys() & records_b.keys())
    if not shared:
        raise UserError(f"--compare: {name_a} and {name_b} share no position (other split, seed or --positions?)")
    counts = [{key: outcome_counts(records[key]) for key in shared} for records in (records_a, records_b)]
    figures = tuple(rate[:-len("_rate")] for rate in RATES)
    changes = paired_changes(*counts, figures)
    side_rates = [{rate: _shared_rate(side, figure) for rate, figure in zip(RATES, figures)} for side in counts]
    only_a = sum(records_a[k]["closed"] and not records_b[k]["closed"] for k in shared)
    only_b = sum(records_b[k]["closed"] and not records_a[k]["closed"] for k in shared)
    table = Table(title=f"{name_a} vs {name_b}: {len(shared)} shared endgame positions")
    for column in ("figure", name_a, name_b, "change [95% interval]"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for rate, change in zip(RATES, changes):
        shown = "-" if change.difference is None else change.shown()
        table.add_row(ENDGAME_LABELS[rate], _fmt(side_rates[0][rate], "{:.1%}"), _fmt(side_rates[1][rate], "{:.1%}"),
                      shown)
    p_value = sign_test_p(only_a, only_b)
    table.add_row("closed here only (paired)", str(only_a), str(only_b), f"sign test p {p_value:.3g}")
    (console or Console()).print(table)
    paired = {"a": name_a, "b": name_b, "positions": len(shared), "closed_only_a": only_a, "closed_only_b": only_b,
              "sign_test_p": p_value,
              "changes": [{**c.to_json(), "figure": rate} for rate, c in zip(RATES, changes)]}
    if json_path:
        atomic_write_json(json_path, paired)
    return paired


def _shared_rate(counts: dict[str, dict[str, tuple[float, int]]], figure: str) -> float | None:
    """One side's rate over the shared positions, from their (count, total) pairs."""
    count = sum(c[figure][0] for c in counts.values())
    total = sum(c[figure][1] for c in counts.values())
    return count / total if total else None
