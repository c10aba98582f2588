"""The solver's shipped games (data/solver-games.json) and a model eval's setup (issue 85, item 12)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401

from cli import cli
from common.progress import EVERY_ENV
from eval.solver_games import GAMES_FILE, SHA256, SOURCE, shipped_games
from solver.decision_store import code_digest
from solver.policy import SolverSettings
from solver.words import default_word_lists

RESULTS = Path(__file__).resolve().parent.parent / "results" / "solver-never-loses"


def test_the_shipped_games_are_this_solvers_and_the_measured_ones():
    """The file is the shipped one, made by this solver's code for the default lists: a change to the
    solver's deciding modules makes it stale (rebuild it as eval/solver_games.py says), and its games
    are those of the solver's recorded runs over every word of both lists (0 lost)."""
    shipped = json.loads(GAMES_FILE.read_text())
    assert hashlib.sha256(GAMES_FILE.read_bytes()).hexdigest() == SHA256
    assert shipped["solver_code"] == code_digest() and shipped["lists"] == default_word_lists().fingerprint
    lists = default_word_lists()
    for kind in ("answers", "allowed"):
        games = shipped_games(lists, kind, SolverSettings())
        recorded = json.loads((RESULTS / f"{kind}-greedy.json").read_text())
        assert games.opener == recorded["opener"] and list(games.guesses) == list(lists.secrets(kind))
        assert {w: len(g.split()) for w, g in recorded["games_played"].items()} == games.guesses
    assert shipped_games(lists, "answers", SolverSettings(lookahead=True)) is None  # only what was shipped


def test_a_model_eval_on_the_allowed_list_shows_and_records_its_setup_and_reads_the_solvers_games(
        tiny_model_dir, tmp_path, monkeypatch):  # noqa: F811
    """The solver beside a model on allowed secrets proved its positions afresh (most of a 45-minute
    eval, none of it shown or recorded); it now reads the shipped games, and the model's loading is
    shown (a plain line in a log) and recorded as the eval's setup_seconds (0.0 before)."""
    monkeypatch.setenv(EVERY_ENV, "0.001")
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(cli, ["eval", "--model", str(tiny_model_dir), "--secrets", "allowed", "--split", "test",
                                      "--games", "3", "--max-tokens", "8", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert f"setup: loading {tiny_model_dir}: 0/1 steps" in result.output
    data = json.loads(out.read_text())
    solver = data["solver_same_secrets"]
    assert solver["source"] == SOURCE == "data/solver-games.json" and solver["opener"] == "lants" and solver["seconds"] < 1
    guesses = shipped_games(default_word_lists(), "allowed", SolverSettings()).guesses
    played = [guesses[g["secret"]] for g in data["per_game"]]
    assert solver["wins"] == 3 and solver["histogram"] == {str(n): played.count(n) for n in range(1, 7)} | {"X": 0}
    assert data["setup_seconds"] > 0


@pytest.mark.slow
def test_the_solver_plays_the_shipped_games_of_the_answers_list(tmp_path, monkeypatch):
    """Every answer's game, played again by a solver with an empty cache (its opener walked afresh)."""
    monkeypatch.setenv("WORDLE_RL_CACHE", str(tmp_path))
    result = CliRunner().invoke(cli, ["eval", "--policy", "solver", "--quiet", "--json", str(tmp_path / "a.json")])
    assert result.exit_code == 0, result.output
    played = {g["secret"]: g["guesses"] for g in json.loads((tmp_path / "a.json").read_text())["per_game"]}
    assert played == shipped_games(default_word_lists(), "answers", SolverSettings()).guesses
