"""How much of a gen-sft dataset already teaches the endgame: targets that name the one word left.

The notes of issue 35 proposed mixing endgame positions into SFT as the next lever. Every
solver game ends by naming its last candidate (` Only X remains.`), so ordinary gen-sft data
may already be endgame-heavy; this counts it. Run from the repository root:

    python -m studies.naming_examples DATA [--json OUT.json]

DATA is a gen-sft folder; its train.jsonl is read.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import click
import numpy as np

from common.errors import run_script
from common.fileio import atomic_write_json, read_jsonl

NAMED = re.compile(r"Only ([a-z]{5}) remains\.")  # sft/cot.py's sentence at one candidate


def naming_counts(rows: list[dict]) -> dict:
    """Examples, those whose target names the one word left, and how often each word is named."""
    named = collections.Counter()
    for row in rows:
        found = NAMED.search(row["messages"][-1]["content"])
        if found:
            named[found.group(1)] += 1
    per_word = np.array(list(named.values()) or [0])
    total = sum(named.values())
    return {"examples": len(rows), "naming_examples": total, "naming_share": round(total / max(len(rows), 1), 4),
            "words_named": len(named), "times_each_word_is_named": {
                "mean": round(float(per_word.mean()), 2), "median": float(np.median(per_word)),
                "min": int(per_word.min()), "max": int(per_word.max())}}


@click.command()
@click.argument("data", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the counts here.")
def main(data: str, json_out: str | None) -> None:
    counts = naming_counts([json.loads(line) for _, line in read_jsonl(Path(data) / "train.jsonl", "SFT data")])
    print(f"{data}: {counts['naming_examples']:,} of {counts['examples']:,} training targets "
          f"({100 * counts['naming_share']:.1f}%) name the one word left; {counts['words_named']:,} words, "
          f"each named {counts['times_each_word_is_named']['mean']:.1f} times on average")
    if json_out:
        atomic_write_json(json_out, {"data": data, **counts})


if __name__ == "__main__":
    run_script(main)
