"""Choose secrets, build the player, play, summarise, write JSON: what `eval` does."""

from __future__ import annotations

from eval.harness import evaluate
from eval.moves import SolverPlayer
from eval.splits import held_out, sample_secrets
from solver.errors import UserError
from solver.fileio import atomic_write_json
from solver.policy import SolverSettings
from solver.setup import load_setup


def choose_secrets(words: tuple[str, ...], split: str, games: int | None, seed: int) -> list[str]:
    pool = held_out(words) if split == "heldout" else list(words)
    if not pool:
        raise UserError("the held-out split of this list is empty; use --split all")
    return sample_secrets(pool, games, seed)


def run_eval(policy: str, secret_kind: str, answers: str | None, allowed: str | None, split: str | None,
             games: int | None, seed: int, settings: SolverSettings, json_path: str | None,
             show_progress: bool = True) -> dict:
    setup = load_setup(secret_kind, answers, allowed)
    if policy != "solver":
        raise UserError("model evaluation needs --model")
    split = split or "all"
    player = SolverPlayer(setup.solver(settings))
    player.policy.opener()  # computed (or read from cache) before the clock starts
    secrets = choose_secrets(setup.lists.secrets(secret_kind), split, games, seed)
    result, records = evaluate(player, setup, secrets, measure_moves=False, show_progress=show_progress)
    result = {"policy": player.name, "secrets": secret_kind, "split": split, "seed": seed,
              "hard": settings.hard, **result, "per_game": [r.to_json() for r in records]}
    if json_path:
        atomic_write_json(json_path, result)
    return result
