"""One-candidate closing, or whole games' wins, split by whether the secret is one token for the
model's tokenizer.

The naming readouts (studies/naming_probe.py) score the single-token words only, so they can
name a secret that is one token and cannot name one that is several: their closing rate is two
rates mixed in the split's proportion. This reads endgame results (`eval --endgame` JSON) and
counts, at each file's one-candidate positions, the closes among one-token secrets and the rest,
paired with a baseline run at the same positions when given:

    python -m studies.closing_by_tokens results/naming-probe/spelled-endgame-test-400.json \
        --baseline results/endgame-rl/start-endgame-test-400.json --json OUT.json

Given game results (`eval` JSON with per-game records) it counts wins the same way, paired game
by game with a baseline's games on the same secrets: a whole-word spelling term in the output
layer (`distill --spelled words`) can only lift a one-token secret, so its lift shows as the
first row's and not the second's.
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()

import click  # noqa: E402

from common.errors import UserError, run_script
from common.fileio import atomic_write_json, read_json
from eval.paired import sign_test_p
from llm.loading import load_model
from llm.spelled_output import one_token_words
from solver.setup import load_setup


def closing_by_tokens(result: dict, single: set[str], baseline: dict | None = None) -> dict:
    """At one-candidate positions: positions and closes with a one-token secret, and the rest;
    against `baseline` (another result at the same positions), the closes each made alone and
    the sign test on them."""
    closed_before = {p["key"]: bool(p["closed"]) for p in baseline["per_position"]} if baseline else {}
    one = [p for p in result["per_position"] if p["candidates"] == 1]
    groups = {"one_token": [p for p in one if p["secret"] in single],
              "several_tokens": [p for p in one if p["secret"] not in single]}
    table = {}
    for name, group in groups.items():
        table[name] = {"positions": len(group), "closed": sum(bool(p["closed"]) for p in group)}
        if baseline:
            only_here = sum(bool(p["closed"]) and not closed_before[p["key"]] for p in group)
            only_there = sum(closed_before[p["key"]] and not p["closed"] for p in group)
            table[name] |= {"closed_here_only": only_here, "closed_in_baseline_only": only_there,
                            "sign_test_p": float(f"{sign_test_p(only_here, only_there):.3g}")}
    return table


def wins_by_tokens(result: dict, single: set[str], baseline: dict | None = None) -> dict:
    """Games and wins with a one-token secret, and the rest; against `baseline` (games on the
    same secrets in the same order), the wins each had alone and the sign test on them."""
    games = result["per_game"]
    before = baseline["per_game"] if baseline else None
    if before is not None and [g["secret"] for g in before] != [g["secret"] for g in games]:
        raise UserError("the baseline's games are not on the same secrets in the same order (same --split, "
                        "--games and --seed)")
    table = {}
    for name, keep in (("one_token", True), ("several_tokens", False)):
        rows = [i for i, g in enumerate(games) if (g["secret"] in single) == keep]
        table[name] = {"games": len(rows), "wins": sum(bool(games[i]["won"]) for i in rows)}
        if before is not None:
            only_here = sum(bool(games[i]["won"]) and not before[i]["won"] for i in rows)
            only_there = sum(bool(before[i]["won"]) and not games[i]["won"] for i in rows)
            table[name] |= {"won_here_only": only_here, "won_in_baseline_only": only_there,
                            "sign_test_p": float(f"{sign_test_p(only_here, only_there):.3g}")}
    return table


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--baseline", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A result at the same positions or secrets to pair each file with (the start's).")
@click.option("--model", default="default", help="Whose tokenizer decides what is one token.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), required=True)
def main(results: tuple[str, ...], baseline: str | None, model: str, json_path: str) -> None:
    _, tokenizer = load_model(model)
    single = set(one_token_words(tokenizer, frozenset(load_setup("answers").lists.allowed)).values())
    paired = read_json(baseline, "baseline result") if baseline else None
    table = {}
    for path in results:
        result = read_json(path, "eval result")
        split = wins_by_tokens if "per_game" in result else closing_by_tokens
        table[path] = split(result, single, paired)
    for path, row in table.items():
        print(path, row)
    atomic_write_json(json_path, table)


if __name__ == "__main__":
    run_script(main)
