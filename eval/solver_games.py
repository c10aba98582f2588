"""The solver's games against every secret of the default word lists, shipped in data/solver-games.json.

A model's eval shows the solver's wins and guesses on the model's secrets beside its own. With the
allowed list as secrets the solver must prove its moves from 5 guesses left, and a fresh solver
spent most of a 64-game eval proving those few games' positions again (issue 85: the model's games
took 543 s of about 45 minutes, with nothing on screen and `setup_seconds` 0.0; its exact proof
search was all a profile of the rest showed). Its games depend only on the lists, its
settings and its code, so for the default lists and settings (those of every model eval) they are
played once, as `eval --policy solver` plays them on an empty cache (the opener's walk of its whole
tree decides every position), and shipped: one character per secret, the guesses its game took
(those of results/solver-never-loses/, whose solver decides as this one: every answer's game the same
when played again, tests/test_solver_games.py).

The file is used only when its sha256 is SHA256 and it names the solver code of this checkout
(solver/decision_store.py `code_digest`); else the games are played (tests/test_solver_games.py
says when the file is stale). It was written by

    python -m eval.solver_games results/solver-never-loses/answers-greedy.json results/solver-never-loses/allowed-greedy.json

and after a change to the solver, from new runs with an empty cache each (then SHA256 is set to
the digest it prints):

    WORDLE_RL_CACHE=$(mktemp -d) python cli.py eval --policy solver --quiet --json answers.json
    WORDLE_RL_CACHE=$(mktemp -d) python cli.py eval --policy solver --secrets allowed --quiet --json allowed.json
    python -m eval.solver_games answers.json allowed.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass

from common.errors import UserError
from common.fileio import atomic_write_text, read_json
from solver.decision_store import code_digest
from solver.policy import SolverSettings
from solver.words import DATA_DIR, WordLists, default_word_lists

GAMES_FILE = DATA_DIR / "solver-games.json"
SOURCE = f"{DATA_DIR.name}/{GAMES_FILE.name}"  # what an eval JSON says its solver figures came from
SHA256 = "c8ebe508f12755272008537fbf30419e024fe57142ed6e2b962fb569a335ffdf"
LOST = "X"


@dataclass(frozen=True)
class SolverGames:
    """The solver's opener and, by secret, the guesses its game took (None: lost)."""

    opener: str
    guesses: dict[str, int | None]


def shipped_games(lists: WordLists, secret_kind: str, settings: SolverSettings) -> SolverGames | None:
    """The shipped games for these lists, secrets and settings, or None when none hold for them: other
    lists or settings, a file that is not the shipped one, or one made by other solver code."""
    key = f"{secret_kind}-{settings.label}"
    try:
        raw = GAMES_FILE.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(raw).hexdigest() != SHA256:
        return None
    shipped = json.loads(raw)
    if shipped["lists"] != lists.fingerprint or shipped["solver_code"] != code_digest() or key not in shipped:
        return None
    games = shipped[key]
    words = lists.secrets(secret_kind)
    return SolverGames(games["opener"], {w: None if g == LOST else int(g) for w, g in zip(words, games["guesses"])})


def _encoded(path: str, secret_kind: str, lists: WordLists) -> dict:
    """One eval JSON's games as the file keeps them, refused unless it is the solver's default play of
    every secret of the default lists: as `eval --json` writes it (`per_game`), or as
    results/solver-never-loses/ keeps it (`games_played`: each game's guesses, won when the last is
    the secret)."""
    result = read_json(path, "eval result")
    words = lists.secrets(secret_kind)
    wanted = {"policy": f"solver-{SolverSettings().label}", "secrets": secret_kind, "split": "all", "hard": False}
    if "games_played" in result:
        played = {w: g.split() for w, g in result["games_played"].items()}
    else:
        played = {g["secret"]: [t["guess"] for t in g["turns"]] for g in result.get("per_game", ())}
    if any(result.get(k) != v for k, v in wanted.items()) or sorted(played) != sorted(words):
        raise UserError(f"{path} is not `eval --policy solver{' --secrets allowed' if secret_kind == 'allowed' else ''}"
                        f" --json` of every secret ({', '.join(f'{k} {v}' for k, v in wanted.items())})")
    return {"opener": played[words[0]][0],
            "guesses": "".join(str(len(played[w])) if played[w][-1] == w else LOST for w in words)}


def main(answers_json: str, allowed_json: str) -> str:
    """Write GAMES_FILE from the two evals; its sha256, for SHA256."""
    lists = default_word_lists()
    label = SolverSettings().label
    shipped = {"about": "the solver's games against every secret, eval/solver_games.py",
               "lists": lists.fingerprint, "solver_code": code_digest(),
               f"answers-{label}": _encoded(answers_json, "answers", lists),
               f"allowed-{label}": _encoded(allowed_json, "allowed", lists)}
    text = json.dumps(shipped, indent=1) + "\n"
    atomic_write_text(GAMES_FILE, text)
    return hashlib.sha256(text.encode()).hexdigest()


if __name__ == "__main__":
    print(f"wrote {GAMES_FILE}: set SHA256 = {main(*sys.argv[1:3])!r} in {__file__}")
