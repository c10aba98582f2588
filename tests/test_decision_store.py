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


def _tampered(path, tmp_path, name: str, checksum: bool):
    """The store at `path` with every row moved to the next position's, its checksum made again or not."""
    with np.load(path) as stored:
        arrays = {key: stored[key] for key in stored.files}
    for table in ("played", "looked"):
        arrays[f"{table}_rows"] = np.roll(arrays[f"{table}_rows"], 1)
    if checksum:  # a file written wrong by the code itself, not edited afterwards
        proof = {k: arrays.pop(k) for k in ("solver", "checksum")}
        arrays["checksum"] = np.array(decision_store._checksum(str(proof["solver"]), arrays))
        arrays["solver"] = proof["solver"]
    np.savez(tmp_path / name, **arrays)
    return tmp_path / name


def test_a_wrong_store_is_searched_again_with_a_note(tmp_path, small_lists_files, capsys):
    """A well-formed store whose rows are shifted taught other moves without a word (issue 37)."""
    setup = load_setup("answers", str(small_lists_files[0]), str(small_lists_files[1]))
    first = setup.solver(SolverSettings())
    games = _play_all(first, setup)
    path = tmp_path / "decisions.npz"
    decision_store.save(first, path)
    cases = [(_tampered(path, tmp_path, "edited.npz", checksum=False), "do not match their checksum"),
             (_tampered(path, tmp_path, "wrong.npz", checksum=True), "disagree with the solver"),
             (path, "were made for another solver")]
    for stored, problem in cases:
        solver = setup.solver(SolverSettings(top_k=5) if stored == path else SolverSettings())
        assert decision_store.load(solver, stored) == 0
        assert all(len(table) == 0 for table in solver.memo_tables().values())
        err = capsys.readouterr().err
        assert err.startswith(f"note: the solver's stored decisions in {stored} {problem}") and err.count("\n") == 1
    again = setup.solver(SolverSettings())
    assert decision_store.load(again, path) > 0 and capsys.readouterr().err == ""
    assert _play_all(again, setup) == games


def test_gen_sft_rebuilds_a_wrong_store_and_teaches_the_solvers_moves(tmp_path, small_lists_files):
    from click.testing import CliRunner

    from cli import cli

    def gen(out: str):
        result = CliRunner().invoke(cli, ["gen-sft", "--out", str(tmp_path / out), "--games", "20", "--quiet",
                                          "--answers", str(small_lists_files[0]), "--allowed", str(small_lists_files[1])])
        assert result.exit_code == 0, result.output
        return (tmp_path / out / "train.jsonl").read_text(), result.stderr

    first, _ = gen("a")
    setup = load_setup("answers", str(small_lists_files[0]), str(small_lists_files[1]))
    path = decision_store.store_path(setup.solver(SolverSettings()))
    _tampered(path, tmp_path, "wrong.npz", checksum=True).replace(path)
    again, err = gen("b")
    assert "disagree with the solver" in err and again == first
