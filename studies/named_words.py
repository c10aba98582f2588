"""What a model names at endgame positions: the secret, a training answer, a held-out one, or else.

At a held-out position a word taught as a training secret can never be right. Counting how
often a model names one (against the words it could name: other held-out answers, words only
in the allowed list, non-words) tells whether its closing answers come from the clues or from
the list of secrets it was taught. Reads `eval --endgame --json` files; run from the repository
root:

    python -m studies.named_words results/endgame-rl/start-endgame-test-400.json [--json OUT.json]
"""

from __future__ import annotations

import collections

import click

from common.errors import run_script
from common.fileio import atomic_write_json, read_json
from eval.splits import is_held_out
from solver.words import default_word_lists

KINDS = ("secret", "training_answer", "held_out_answer", "allowed_only", "not_a_word", "no_guess")


def kind_of(guess: str | None, secret: str, answers: set[str], allowed: set[str]) -> str:
    if guess is None:
        return "no_guess"
    if guess == secret:
        return "secret"
    if guess in answers:
        return "held_out_answer" if is_held_out(guess) else "training_answer"
    return "allowed_only" if guess in allowed else "not_a_word"


def named_words(result: dict) -> dict:
    """Counts of each kind of named word, at one-candidate positions and at all of them."""
    lists = default_word_lists()
    answers, allowed = set(lists.answers), set(lists.allowed)
    counts = {"one_candidate": collections.Counter(), "all": collections.Counter()}
    for record in result["per_position"]:
        kind = kind_of(record["guess"], record["secret"], answers, allowed)
        counts["all"][kind] += 1
        if record["candidates"] == 1:
            counts["one_candidate"][kind] += 1
    return {scope: {kind: counter[kind] for kind in KINDS} | {"positions": sum(counter.values())}
            for scope, counter in counts.items()}


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the counts here.")
def main(files: tuple[str, ...], json_out: str | None) -> None:
    table = {}
    for path in files:
        result = read_json(path, "endgame result")
        table[path] = {"split": result.get("split"), **named_words(result)}
        for scope in ("one_candidate", "all"):
            row = table[path][scope]
            print(f"{path} [{scope}, {row['positions']} positions]: "
                  + ", ".join(f"{kind} {row[kind]}" for kind in KINDS))
    if json_out:
        atomic_write_json(json_out, table)


if __name__ == "__main__":
    run_script(main)
