"""What a model lists in its thought where several candidates are left ("5 possible words: a, b, ..."):
how many listed words are true candidates, how many are on the answer list, and how often it plays
one it listed. A tuned output layer acts at every whole-word token, listed words included; an
objective read after the text as written cannot see that (results/output-rl/).

    python -m studies.listed_words --games A.json --games B.json --json out.json
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

from common.errors import run_script

LIST = re.compile(r"possible words: ([^.]*)\.")


@click.command()
@click.option("--games", "paths", multiple=True, required=True, type=click.Path(exists=True, dir_okay=False),
              help="An eval --json file (repeatable).")
@click.option("--json", "json_out", required=True, type=click.Path(dir_okay=False))
def main(paths: tuple[str, ...], json_out: str) -> None:
    from common.fileio import atomic_write_json, read_json
    from eval.endgame import answered_positions
    from solver.setup import load_setup

    setup = load_setup("answers")
    answer_list = set(setup.lists.answers)
    out = {}
    for path in paths:
        answers = listed = true = on_list = from_list = 0
        for position, move in answered_positions(setup, read_json(path, "an eval JSON")):
            found = LIST.search((move.get("text") or "").split("</think>")[0])
            if found is None or len(position.state.candidates) < 2:
                continue
            words = [w.strip().lower() for w in found.group(1).split(",")]
            candidates = set(position.state.candidate_words())
            answers, listed = answers + 1, listed + len(words)
            true += sum(w in candidates for w in words)
            on_list += sum(w in answer_list for w in words)
            from_list += move.get("guess") in words
        out[path] = {"answers_with_a_list": answers, "words_listed": listed,
                     "listed_true_candidates": round(true / max(listed, 1), 3),
                     "listed_on_the_answer_list": round(on_list / max(listed, 1), 3),
                     "guess_from_its_list": round(from_list / max(answers, 1), 3)}
        click.echo(f"{path}: {json.dumps(out[path])}")
    atomic_write_json(Path(json_out), out)


if __name__ == "__main__":
    run_script(main)
