"""Paired comparison of two evals: discordant wins and the exact sign test, in the table and --json."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli import cli
from eval.paired import paired_wins, sign_test_p


def result(wins: dict[str, bool]) -> dict:
    won = sum(wins.values())
    return {"games": len(wins), "wins": won, "histogram": {"4": won, "X": len(wins) - won},
            "per_game": [{"secret": s, "won": w} for s, w in wins.items()]}


@pytest.mark.parametrize("only_a, only_b, p", [
    (0, 0, 1.0), (1, 0, 1.0), (5, 0, 0.0625), (0, 6, 0.03125), (3, 3, 1.0),
    (8, 2, 0.109375),  # 2 * (1 + 10 + 45) / 1024
])
def test_sign_test_matches_the_binomial_tail(only_a, only_b, p):
    assert sign_test_p(only_a, only_b) == pytest.approx(p)
    assert sign_test_p(only_b, only_a) == pytest.approx(p)


def test_paired_wins_count_only_shared_secrets():
    a = result({"crane": True, "slate": True, "tower": False, "pious": True})
    b = result({"crane": True, "slate": False, "tower": True, "fjord": True})
    paired = paired_wins(a, b)
    assert (paired.games, paired.wins_a, paired.wins_b, paired.only_a, paired.only_b) == (3, 2, 2, 1, 1)
    assert paired.p_value == 1.0


def test_compare_shows_and_writes_the_paired_figures(tmp_path):
    secrets = [f"w{i:03d}" for i in range(40)]
    a = {s: i < 2 for i, s in enumerate(secrets)}  # A wins 2
    b = {s: i < 10 for i, s in enumerate(secrets)}  # B wins those 2 and 8 more
    paths = []
    for name, wins in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(result(wins)))
        paths.append(str(tmp_path / name))
    out = tmp_path / "paired.json"
    shown = CliRunner().invoke(cli, ["eval", "--compare", *paths, "--json", str(out)])
    assert shown.exit_code == 0, shown.output
    assert "won here only" in shown.output and "0.008" in shown.output
    written = json.loads(out.read_text())
    assert written["paired_wins"] == {"games": 40, "wins_a": 2, "wins_b": 10, "only_a": 0, "only_b": 8,
                                      "p_value": pytest.approx(2 / 256)}
