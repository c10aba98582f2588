"""Played guesses that fit the clues, by their place in the game (1st, 2nd, 3rd and later),
read from eval JSONs' per-game records: where the consistency rate of every model in
results/later-guesses/ comes from.

    python -m studies.later_guesses [--json OUT] NAME=EVAL.json ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def by_place(path: str) -> dict:
    """Played and fitting guesses at places 1, 2 and 3+, and the eval's own consistency rate."""
    report = json.loads(Path(path).read_text())
    played, fitting = [0, 0, 0], [0, 0, 0]
    for game in report["per_game"]:
        place = 0
        for move in game["moves"]:
            if move["failure"] is None:  # a played guess; refused answers are not played
                slot = min(place, 2)
                played[slot] += 1
                fitting[slot] += bool(move["consistent"])
                place += 1
    return {"eval": path, "games": report["games"], "consistency_rate": report["consistency_rate"],
            "played": dict(zip(("1st", "2nd", "3rd+"), played)), "fitting": dict(zip(("1st", "2nd", "3rd+"), fitting))}


def main(args: list[str]) -> None:
    out = None
    if args[:1] == ["--json"]:
        out, args = args[1], args[2:]
    rows = {name: by_place(path) for name, path in (a.split("=", 1) for a in args)}
    print(f"{'model':28} {'games':>5} {'rate':>6} {'1st':>8} {'2nd':>8} {'3rd+':>8}")
    for name, r in rows.items():
        cells = " ".join(f"{r['fitting'][p]:>3}/{r['played'][p]:<4}" for p in ("1st", "2nd", "3rd+"))
        print(f"{name:28} {r['games']:>5} {r['consistency_rate']:6.1%} {cells}")
    if out:
        Path(out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
