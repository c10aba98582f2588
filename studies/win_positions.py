"""How many candidates were left before each winning guess, in eval JSONs' per-game records: a
win with one left is a closing, one with 2-6 left a real word that fit the clues and was the secret.

    python -m studies.win_positions A.json [B.json ...] [--json OUT.json]
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from solver.feedback import parse_pattern
from solver.setup import load_setup
from solver.state import state_from_history


def win_positions(path: str) -> dict[str, int]:
    """Wins by candidates left before the winning guess: '1', '2-6', '7+'."""
    setup = load_setup("answers")
    counts: Counter[str] = Counter()
    for game in json.load(open(path))["per_game"]:
        if not game["won"]:
            continue
        before = state_from_history(setup.lists, setup.matrix,
                                    [(t["guess"], parse_pattern(t["pattern"])) for t in game["turns"][:-1]])
        left = len(before.candidates)
        counts["1" if left == 1 else "2-6" if left <= 6 else "7+"] += 1
    return {key: counts[key] for key in ("1", "2-6", "7+")}


if __name__ == "__main__":
    args = sys.argv[1:]
    out = args[args.index("--json") + 1] if "--json" in args else None
    files = [a for a in args if a != "--json" and a != out]
    table = {path: win_positions(path) for path in files}
    for path, counts in table.items():
        print(f"{path}: wins {sum(counts.values())}, by candidates left before the winning guess {counts}")
    if out:
        with open(out, "w") as f:
            json.dump(table, f, indent=2)
