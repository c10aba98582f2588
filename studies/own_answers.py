"""The answers a model gave at the endgame positions of its own eval games, as an endgame result.

`eval --from-games GAMES` asks a model for a fresh answer at every position with 1-6 candidates
left in GAMES. For the model that played GAMES that costs a second pass it does not need: the
answer it gave there when it played is already one sample at the eval's temperature, drawn at a
position fixed before it was drawn. This writes those recorded answers as an `eval --endgame`
JSON file, so `eval --compare` pairs them by position with another model's `--from-games` run:

    python -m studies.own_answers results/endgame-rl/start-test-128.json --json OUT.json
"""

from __future__ import annotations

import click

from common.errors import run_script
from common.fileio import atomic_write_json, read_json
from eval.endgame import KIND, model_answers, position_record, summarise_endgame
from llm.histories import ENDGAME_CANDIDATES
from solver.setup import load_setup


def recorded_answers(games: dict, max_candidates: int = ENDGAME_CANDIDATES) -> dict:
    """An endgame result whose per-position records are the answers given in `games` itself."""
    setup = load_setup(games.get("secrets", "answers"))
    answered = model_answers(setup, games, max_candidates)
    records = [position_record(position, move["text"]) for position, move in answered]
    sampling = {key: games.get(key) for key in ("temperature", "top_p", "max_tokens")}
    return {"kind": KIND, "policy": games.get("policy"), "secrets": setup.secret_kind, "split": games.get("split"),
            "source": "recorded", "seed": games.get("seed"), "max_candidates": max_candidates, **sampling,
            **summarise_endgame(records), "per_position": records}


@click.command()
@click.argument("games_file", type=click.Path(dir_okay=False))
@click.option("--max-candidates", type=click.IntRange(1, 50), default=ENDGAME_CANDIDATES, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), required=True, help="Where the result goes.")
def main(games_file: str, max_candidates: int, json_path: str) -> None:
    result = recorded_answers(read_json(games_file, "games file"), max_candidates)
    atomic_write_json(json_path, result)
    print(f"{result['positions']} positions, closed {result['closed_rate']:.1%}, "
          f"one candidate left: closed {result['one_candidate_closed_rate']:.1%}, "
          f"repeat {result['one_candidate_repeat_rate']:.1%}")


if __name__ == "__main__":
    run_script(main)
