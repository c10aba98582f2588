"""Where `Only <previous guess> remains.` happens: repeats in endgame benchmark records, split by
what the position looked like.

The SFT model of ../shared/adapters/gpu-sft-2400 answers many one-candidate positions with its
own last guess. Two features of a position might invite it: the last guess was itself a near
miss (a word that still fitted every earlier clue, so "only X remains" was nearly true a turn
ago), and the prompt names refused answers. This reads `eval --endgame` JSON files and prints,
per file, the repeat and closing rates at positions with and without each feature, with counts:

    python -m studies.repeat_loop results/endgame-rl/start-endgame-test-400.json [MORE.json ...] [--json OUT]
"""

from __future__ import annotations

import click

from common.errors import run_script
from common.fileio import atomic_write_json, read_json
from solver.feedback import parse_pattern
from solver.setup import load_setup


def last_guess_was_near_miss(setup, key: str) -> bool:
    """Whether the position's last guess fitted every clue before it (it could have been the secret)."""
    turns = [item.split("=") for item in filter(None, key.split(":", 1)[1].split("|")[0].split(","))]
    state = setup.start
    for guess, pattern in turns[:-1]:
        state = state.play(guess, parse_pattern(pattern))
    return state.constraints.allows(turns[-1][0])


def split_rates(records: list[dict], feature) -> dict:
    """Repeat-the-last-guess and closing rates where `feature(record)` holds and where it does not."""
    out = {}
    for name, chosen in (("with", [r for r in records if feature(r)]), ("without", [r for r in records if not feature(r)])):
        n = len(chosen)
        out[name] = {"positions": n,
                     "repeat_last_rate": round(sum(r["repeat_last"] for r in chosen) / n, 4) if n else None,
                     "closed_rate": round(sum(r["closed"] for r in chosen) / n, 4) if n else None}
    return out


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(files, json_path) -> None:
    setup = load_setup("answers")
    report = {}
    for path in files:
        records = read_json(path, "endgame result").get("per_position", [])
        one = [r for r in records if r["candidates"] == 1]
        report[path] = {
            "one_candidate_positions": len(one),
            "near_miss_last_guess": split_rates(one, lambda r: last_guess_was_near_miss(setup, r["key"])),
            "refusals_named": split_rates(one, lambda r: bool(r["refused"])),
        }
        for feature in ("near_miss_last_guess", "refusals_named"):
            parts = report[path][feature]
            print(f"{path}: one candidate left, {feature}: " + "; ".join(
                f"{side} {v['positions']} positions, repeats the last guess {v['repeat_last_rate']}, closes "
                f"{v['closed_rate']}" for side, v in parts.items()))
    if json_path:
        atomic_write_json(json_path, report)


if __name__ == "__main__":
    run_script(main)
