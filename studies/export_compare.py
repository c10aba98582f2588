"""The exported bundled start through `python -m mlx_lm generate`, beside `eval`'s answers with the
adapter and with the exported folder (all greedy), as comparison.json.

    python -m studies.export_compare prompt N   # the user message of position N of eval's game
    python -m studies.export_compare            # comparison.json, from the outputs README.md lists

Run from the repository root after the commands in README.md; it reads their outputs only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "results" / "export"  # the files it reads and writes
SEPARATOR = "=========="  # mlx_lm generate prints the answer between two of these


def mlx_lm_answer(path: Path) -> str:
    """The text `python -m mlx_lm generate` printed between its separators."""
    return path.read_text().split(SEPARATOR)[1].strip()


def eval_game(path: Path) -> dict:
    return json.loads(path.read_text())["per_game"][0]


def user_message(position: int) -> str:
    """The user message eval showed at `position` (1-based) of its game with the adapter, from llm/format.py."""
    from llm.format import render_state
    from solver.feedback import parse_pattern
    from solver.setup import load_setup
    from solver.state import state_from_history

    setup = load_setup("answers")
    turns = eval_game(HERE / "eval-adapter.json")["turns"][:position - 1]
    return render_state(state_from_history(setup.lists, setup.matrix,
                                           [(t["guess"], parse_pattern(t["pattern"])) for t in turns]))


def main() -> None:
    adapter, exported = eval_game(HERE / "eval-adapter.json"), eval_game(HERE / "eval-export.json")
    results = json.loads((HERE / "eval-adapter.json").read_text()), json.loads((HERE / "eval-export.json").read_text())
    positions = []
    for number in range(1, len(adapter["moves"]) + 1):
        path = HERE / f"mlx-lm-generate-{number}.txt"
        if path.exists():
            generated = mlx_lm_answer(path)
            positions.append({"position": number, "user": user_message(number), "mlx_lm_generate": generated,
                              "eval_adapter": adapter["moves"][number - 1]["text"],
                              "eval_export": exported["moves"][number - 1]["text"],
                              "equal": generated == adapter["moves"][number - 1]["text"]
                              == exported["moves"][number - 1]["text"]})
    comparison = {
        "eval_temperatures": [r["temperature"] for r in results],
        "eval_secret": adapter["secret"],
        "eval_games_equal": adapter == exported,
        "eval_answers": len(adapter["moves"]),
        "mlx_lm_positions_equal": all(p["equal"] for p in positions),
        "positions": positions,
        "export_check": json.loads((HERE / "export-summary.json").read_text())["check"],
    }
    (HERE / "comparison.json").write_text(json.dumps(comparison, indent=2) + "\n")
    print(json.dumps({k: v for k, v in comparison.items() if k != "positions"}, indent=2))
    print(json.dumps([{k: p[k] for k in ("position", "equal", "mlx_lm_generate")} for p in positions], indent=2))


if __name__ == "__main__":
    if sys.argv[1:2] == ["prompt"]:
        print(user_message(int(sys.argv[2])))
    else:
        main()
