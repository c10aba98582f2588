"""How a model's games are lost: of those lost to invalid answers in a row, the refusal that ended
them and whether it named the game's last guess again ("Only <last guess> remains."); and what it
names with one candidate left, first and after a refusal.

A plain model's losses are mostly not wrong words but refusals: the sampled SFT start and its
distilled model name a word they already played, three times, until the game ends. Reads
`eval --json` files with per-game records; run from the repository root:

    python -m studies.lost_games results/distill-word/openings-test-128-seed5.json [MORE.json ...] [--json OUT]
"""

from __future__ import annotations

import collections

import click

from common.errors import run_script
from common.fileio import atomic_write_json, read_json
from eval.endgame import model_answers
from solver.setup import load_setup
from studies.named_words import kind_of


def lost_games(result: dict) -> dict:
    """Wins, losses, losses to invalid answers by the last refusal's kind, and those whose last
    refused answer was the game's last accepted guess."""
    ended_by: collections.Counter = collections.Counter()
    last_guess_again = 0
    for game in result["per_game"]:
        if not game["lost_to_invalid"]:
            continue
        last = game["moves"][-1]
        ended_by[last["failure"]] += 1
        played = [turn["guess"] for turn in game["turns"]]
        last_guess_again += bool(played) and last["guess"] == played[-1]
    games = result["per_game"]
    return {"games": len(games), "wins": sum(g["won"] for g in games),
            "lost_to_invalid": sum(ended_by.values()), "ended_by": dict(ended_by),
            "named_last_guess_again": last_guess_again}


def one_left_names(result: dict) -> dict:
    """At every answer given with one candidate left: what it named (the game's last guess, an
    earlier one, else `studies.named_words`' kinds), counted apart where the prompt named a refusal."""
    setup = load_setup("answers")
    answers, allowed = set(setup.lists.answers), set(setup.lists.allowed)
    counts: dict[str, collections.Counter] = {"first": collections.Counter(), "after_refusal": collections.Counter()}
    for position, move in model_answers(setup, result, max_candidates=1):
        guess, played = move.get("guess"), position.state.guesses
        if guess != position.secret and guess in played:
            kind = "last_guess" if guess == played[-1] else "earlier_guess"
        else:
            kind = kind_of(guess, position.secret, answers, allowed)
        counts["after_refusal" if position.rejected else "first"][kind] += 1
    return {when: dict(counter.most_common()) for when, counter in counts.items()}


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the counts here.")
def main(files: tuple[str, ...], json_out: str | None) -> None:
    table = {}
    for path in files:
        result = read_json(path, "eval result")
        table[path] = row = {**lost_games(result), "one_left_named": one_left_names(result)}
        print(f"{path}: {row['wins']} of {row['games']} won; {row['lost_to_invalid']} lost to invalid answers "
              f"({', '.join(f'{k} {v}' for k, v in sorted(row['ended_by'].items()))}), "
              f"{row['named_last_guess_again']} by naming the last guess again")
        for when, named in row["one_left_named"].items():
            print(f"  one candidate left, {when.replace('_', ' ')}: " + ", ".join(f"{k} {v}" for k, v in named.items()))
    if json_out:
        atomic_write_json(json_out, table)


if __name__ == "__main__":
    run_script(main)
