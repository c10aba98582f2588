"""Issue 63, unclear messages: every refusal names what is wrong in the user's own terms (the flag,
the file) and what to do (`rl --steps` below the steps done: tests/test_rl.py)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)
from test_bad_output import assert_one_error

from cli import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_from_games_given_an_endgame_result_or_a_config_says_what_it_takes(tiny_model_dir, tmp_path):  # noqa: F811
    """It said "no position with 1-6 candidates left" of files that hold no games at all."""
    endgame = tmp_path / "endgame.json"
    assert run("eval", "--model", tiny_model_dir, "--endgame", "--positions", 2, "--max-tokens", 8, "--quiet",
               "--json", endgame).exit_code == 0
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"steps": 3}))
    args = ["eval", "--model", tiny_model_dir, "--endgame", "--quiet", "--from-games"]
    takes = "it takes the games of a whole-game eval, as eval --model M --adapter A --json F writes them"
    assert_one_error(run(*args, endgame), f"--from-games {endgame} is an endgame result (eval --endgame): {takes}")
    assert_one_error(run(*args, config), f"--from-games {config} is not an eval result of whole games (no per_game "
                                         f"list): {takes}")


def test_pipeline_rl_start_games_names_the_rl_command_that_takes_the_file(tmp_path):
    """It named rollout.start_games, a config key pipeline has no flag for."""
    out = tmp_path / "P"
    assert_one_error(run("pipeline", "--out", out, "--rl-start", "games"),
                     "--rl-start games needs a games file, and pipeline has no flag for one: run the pipeline with "
                     "--rl-start any or endgame, or run its RL stage yourself with rl's --start-games: rl --adapter "
                     f"{out}/sft/adapter --out {out}/rl --start games --start-games GAMES.json")
    assert not out.exists()


def test_sft_data_given_a_file_names_its_folder(tmp_path):
    """It said "data folder not found" of a file that is there."""
    train = tmp_path / "data" / "train.jsonl"
    train.parent.mkdir()
    train.write_text("")
    assert_one_error(run("sft", "--data", train, "--out", tmp_path / "run"),
                     f"--data {train} is a file; give the folder that holds it and the other splits, as gen-sft "
                     f"writes them: --data {train.parent}")
    assert_one_error(run("sft", "--data", tmp_path / "none", "--out", tmp_path / "run"),
                     f"--data {tmp_path / 'none'} does not exist; make it with gen-sft --out {tmp_path / 'none'}")


@pytest.mark.parametrize("text, message", [
    ("schedule: 'grpo:0'\n", "config {config}: schedule 'grpo:0': the step count of 'grpo' must be a whole number"),
    ("steps: 1e3\n", "config {config}: steps must be a whole number, got '1e3' (text, not a number: YAML reads an "
                     "exponent as text unless written like 1.0e+3; write 1000)"),
    ("grpo:\n  learning_rate: 1e-4\n", "config {config}: grpo.learning_rate must be a number, got '1e-4' (text, not "
                                       "a number: YAML reads an exponent as text unless written like 1.0e+3; write "
                                       "0.0001)"),
    ("steps: '300'\n", "got '300' (text, not a number: it is quoted; write 300)"),
])
def test_a_config_value_is_refused_naming_its_file_and_why(tmp_path, text, message):
    """A schedule error did not name the config file; `steps: 1e3`, which YAML reads as a string,
    was refused without saying so."""
    config = tmp_path / "config.yaml"
    config.write_text(text)
    assert_one_error(run("rl", "--config", config, "--out", tmp_path / "rl"), message.format(config=config))
    assert not (tmp_path / "rl").exists()


def test_a_schedule_flag_is_named_as_the_flag(tmp_path):
    assert_one_error(run("rl", "--schedule", "grpo:2,sft:1", "--out", tmp_path / "rl"),
                     "--schedule 'grpo:2,sft:1': unknown phase 'sft' (phases: grpo, ei)")


def test_report_on_a_missing_folder_says_it_does_not_exist(tmp_path):
    """It said the folder "has no metrics.jsonl"."""
    assert_one_error(run("report", tmp_path / "nope"),
                     f"{tmp_path / 'nope'} does not exist: give the --out folder of an rl or sft run")


def test_a_decision_store_in_the_way_is_refused_before_the_solvers_work(tmp_path, small_lists_files, monkeypatch):
    """A folder where the solver's decisions are stored failed their write after every game was
    played; now before the solver searches anything (its opener is not in the fresh cache)."""
    from solver.decision_store import store_path
    from solver.setup import load_setup

    cache = tmp_path / "cache"
    monkeypatch.setenv("WORDLE_RL_CACHE", str(cache))
    answers, allowed = small_lists_files
    store = store_path(load_setup("answers", str(answers), str(allowed)).solver())
    store.mkdir(parents=True)
    out = tmp_path / "data"
    assert_one_error(run("gen-sft", "--out", out, "--games", 4, "--answers", answers, "--allowed", allowed, "--quiet"),
                     f"the solver's decisions cannot be stored: {store} is a folder, not a file; remove what is in "
                     "the way, set WORDLE_RL_CACHE to another folder, or pass --cold")
    assert not (cache / "openers.json").exists() and not out.exists()
