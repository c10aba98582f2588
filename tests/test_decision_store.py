"""The solver's decisions on disk: replayed exactly, keyed by code version, harmless when broken."""

from __future__ import annotations

import numpy as np

from solver import decision_store
from solver.policy import SolverSettings
from solver.setup import load_setup


def _play_all(solver, setup) -> list[str]:
    """Every secret's game, as the guesses played."""
    games = []
    for column in range(len(setup.start.candidates)):
        state, guesses = setup.start, []
        while not state.over:
            guess = solver.choose(state)
            state = state.play(guess, int(setup.matrix[setup.lists.index(guess), column]))
            guesses.append(guess)
        games.append(",".join(guesses))
    return games


def test_stored_decisions_replay_the_same_games(tmp_path, small_lists_files, monkeypatch):
    setup = load_setup("answers", str(small_lists_files[0]), str(small_lists_files[1]))
    # An empty cache: the opener is chosen by walking the tree (which fills the memo), whichever tests ran first.
    monkeypatch.setenv("WORDLE_RL_CACHE", str(tmp_path / "cache"))
    settings = SolverSettings(lookahead=True)
    path = tmp_path / "decisions.npz"
    first = setup.solver(settings)
    games = _play_all(first, setup)
    decision_store.save(first, path)
    stored = sum(len(table) for table in first.memo_tables().values())

    second = setup.solver(settings)
    assert decision_store.load(second, path) == stored > 100
    assert {name: dict(table) for name, table in second.memo_tables().items()} == \
        {name: dict(table) for name, table in first.memo_tables().items()}
    assert _play_all(second, setup) == games
    assert sum(len(table) for table in second.memo_tables().values()) == stored  # nothing searched again


def test_broken_or_missing_store_is_empty(tmp_path, small_lists_files):
    setup = load_setup("answers", str(small_lists_files[0]), str(small_lists_files[1]))
    solver = setup.solver(SolverSettings())
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK\x03\x04 not a zip")
    assert decision_store.load(solver, broken) == 0
    assert decision_store.load(solver, tmp_path / "missing.npz") == 0
    np.savez(tmp_path / "other.npz", something=np.zeros(3))
    assert decision_store.load(solver, tmp_path / "other.npz") == 0


def test_store_is_per_settings_lists_and_code(small_lists_files, monkeypatch):
    setup = load_setup("answers", str(small_lists_files[0]), str(small_lists_files[1]))
    greedy, lookahead = setup.solver(SolverSettings()), setup.solver(SolverSettings(lookahead=True))
    assert decision_store.store_path(greedy) != decision_store.store_path(lookahead)
    assert setup.lists.fingerprint in decision_store.store_path(greedy).name
    before = decision_store.store_path(greedy)
    monkeypatch.setattr(decision_store, "_DECIDING_MODULES", ("policy.py", "entropy.py"))
    assert decision_store.store_path(greedy) != before  # other code, other file


def test_a_store_naming_guesses_that_do_not_exist_is_empty(tmp_path, small_lists_files):
    """A store of the right layout with rows past the list (another list's file, an edit) is not
    replayed: it would play a word that is not there, or crash."""
    setup = load_setup("answers", str(small_lists_files[0]), str(small_lists_files[1]))
    first = setup.solver(SolverSettings())
    _play_all(first, setup)
    path = tmp_path / "decisions.npz"
    decision_store.save(first, path)
    with np.load(path) as stored:
        arrays = {key: stored[key] for key in stored.files}
    arrays["played_rows"] = arrays["played_rows"] + len(setup.lists.allowed)
    np.savez(tmp_path / "foreign.npz", **arrays)
    arrays["played_rows"] -= len(setup.lists.allowed)
    arrays["played_ends"] = arrays["played_ends"][::-1].copy()
    np.savez(tmp_path / "shuffled.npz", **arrays)
    for name in ("foreign.npz", "shuffled.npz"):
        second = setup.solver(SolverSettings())
        assert decision_store.load(second, tmp_path / name) == 0
        assert all(len(table) == 0 for table in second.memo_tables().values())
    assert decision_store.load(setup.solver(SolverSettings()), path) > 0
