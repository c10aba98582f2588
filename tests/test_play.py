"""`play`: a model plays one secret as eval plays it, or suggests the next guess (tiny random model)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from cli import cli
from eval.play import answer_at
from eval.play_views import PlayView
from llm.format import Move, format_answer
from llm.naming_head import HEAD_FILE, NamingHead
from llm_fixtures import tiny_model_dir, write_lora_adapter  # noqa: F401
from solver.entropy import guess_score
from solver.feedback import feedback, pattern_to_string
from solver.setup import load_setup

QUICK = ["--max-tokens", "24"]  # a random model's answers: short, and every one refused


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input)


@pytest.fixture
def lists(small_lists_files) -> list[str]:
    answers, allowed = small_lists_files
    return ["--answers", str(answers), "--allowed", str(allowed)]


def eval_games(model: str, lists: list[str], out, *extra: str) -> list[dict]:
    result = run("eval", "--model", model, "--games", "2", "--seed", "3", "--quiet", "--json", str(out), *QUICK,
                 *lists, *extra)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["per_game"]


def test_play_shows_each_answer_and_plays_evals_game_for_that_secret_and_seed(tiny_model_dir, lists,  # noqa: F811
                                                                              tmp_path):
    """Plain lines off a terminal: each answer's text, what the game made of it beside the solver's
    move, the ending; --json's game is eval's record of the same secret, seed and game number
    (game 1 of an eval of two: its answers are drawn as eval drew them in a batch of two)."""
    model = str(tiny_model_dir)
    games = eval_games(model, lists, tmp_path / "eval.json")
    for number, game in enumerate(games):
        out = tmp_path / f"play{number}.json"
        result = run("play", "--model", model, "--word", game["secret"], "--seed", "3", "--json", str(out), *QUICK,
                     *lists, *(["--game", "1"] if number else []))
        assert result.exit_code == 0, result.output
        played = json.loads(out.read_text())
        assert played["game"] == game and played["game_number"] == number and played["naming_head"] is None
        lines = result.output.splitlines()
        assert lines[0] == (f"{model} plays {game['secret'].upper()} (seed 3, temperature 0.7, eval's game "
                            f"{number}); naming head: none (no --adapter, and no head in --model's folder)")
        assert lines[-1] == f"{game['secret'].upper()}: lost to 3 unplayable answers in a row"
        solver = played["answers"][0]["solver"]
        assert solver["next_guess"] and solver["entropy_bits"] > 4
        for answer, (said, outcome) in zip(game["moves"], zip(lines[1:-1:2], lines[2:-1:2])):
            assert said.startswith("turn 1 answer: ") and answer["failure"] == "no_tags"
            assert outcome == (f"turn 1 refused: no word (no <guess> tag); solver: {solver['next_guess']} "
                               f"{solver['entropy_bits']:.2f} bits")
        assert len(lines) == 2 + 2 * len(game["moves"])


def test_a_played_answer_shows_its_thought_tiles_candidates_left_and_bits_beside_the_solvers(small_lists_files):
    setup = load_setup("answers", *map(str, small_lists_files))
    state, secret = setup.start, setup.lists.answers[5]
    guess = next(w for w in setup.lists.answers if w != secret)
    after = state.play(guess, feedback(guess, secret))
    solver = setup.solver()
    answer = answer_at(state, Move(guess, format_answer("Two\nlines.", guess)), solver, after)
    out = io.StringIO()
    PlayView(Console(file=out, highlight=False)).answer(answer)
    bits, expected = guess_score(setup.matrix, setup.lists.index(guess), state.candidates)
    best = solver.choose(state)
    best_bits, _ = guess_score(setup.matrix, setup.lists.index(best), state.candidates)
    assert out.getvalue().splitlines() == [
        "turn 1 thought: Two lines.",
        f"turn 1 guess: {guess} {pattern_to_string(feedback(guess, secret))}, {len(state.candidates)} -> "
        f"{len(after.candidates)} left, {bits:.2f} bits, {expected:.1f} expected left; solver: {best} {best_bits:.2f} bits",
    ]
    assert answer.to_json()["candidates_before"] == len(state.candidates) == 300


def test_history_gets_the_models_suggestion_beside_the_solvers(tiny_model_dir, lists, tmp_path):  # noqa: F811
    """The suggestion at a position is the game's: at the start, the answers eval's game 0 gives with
    the same seed, each refused one named in the next prompt; interactive play asks at each position."""
    model = str(tiny_model_dir)
    games = eval_games(model, lists, tmp_path / "eval.json")
    out = tmp_path / "advice.json"
    result = run("play", "--model", model, "--history", "", "--seed", "3", "--json", str(out), *QUICK, *lists)
    assert result.exit_code == 0, result.output
    advice = json.loads(out.read_text())
    assert [a["text"] for a in advice["answers"]] == [m["text"] for m in games[0]["moves"]]
    assert advice["next_guess"] is None and advice["solver"]["remaining"] == 300
    assert f"Solver's guess: {advice['solver']['next_guess'].upper()}" in result.output
    assert result.output.splitlines()[-1] == "The model gave no playable guess in 3 answers."

    first = advice["solver"]["next_guess"]
    result = run("play", "--model", model, "--history", f"{first}:00000", "--json", str(out), *QUICK, *lists)
    assert result.exit_code == 0, result.output
    after = json.loads(out.read_text())
    assert after["solver"]["history"] == [{"guess": first, "pattern": "00000"}]
    assert after["solver"]["remaining"] < 300 and len(after["answers"]) == 3

    result = run("play", "--model", model, *QUICK, *lists, input=f"{first} 00000\nq\n")
    assert result.exit_code == 0, result.output
    assert result.output.count("Solver's guess:") == 2
    assert result.output.count("The model gave no playable guess in 3 answers.") == 2


def test_play_uses_the_naming_head_beside_the_adapter_as_eval_does(tiny_model_dir, lists, tmp_path):  # noqa: F811
    model, adapter = str(tiny_model_dir), tmp_path / "adapter"
    write_lora_adapter(tiny_model_dir, adapter)
    rng = np.random.default_rng(0)
    NamingHead(rng.normal(size=(2, 64)).astype(np.float32), rng.normal(size=(64, 2)).astype(np.float32),
               rng.normal(size=(156, 64)).astype(np.float32), 0.01).save(adapter / HEAD_FILE)
    games = eval_games(model, lists, tmp_path / "eval.json", "--adapter", str(adapter))
    out = tmp_path / "play.json"
    result = run("play", "--model", model, "--adapter", str(adapter), "--word", games[0]["secret"], "--seed", "3",
                 "--json", str(out), *QUICK, *lists)
    assert result.exit_code == 0, result.output
    assert f"naming head: {adapter / HEAD_FILE}" in result.output.splitlines()[0]
    played = json.loads(out.read_text())
    assert played["game"] == games[0] and played["naming_head"] == str(adapter / HEAD_FILE)
    assert played["policy"].endswith("+naming head")

    result = run("play", "--model", model, "--adapter", str(adapter), "--word", games[0]["secret"],
                 "--no-naming-head", *QUICK, *lists)
    assert result.exit_code == 0, result.output
    assert f"naming head: off (--no-naming-head; {adapter / HEAD_FILE} not used)" in result.output.splitlines()[0]


@pytest.mark.parametrize("args, message", [
    (["--word", "zzzzz"], "not in the allowed word list"),
    (["--word", "cr4ne"], "must be 5 letters a-z"),
    (["--word", "aahed"], "not in the answers list"),
    (["--word", " "], "--word is empty"),
    (["--word", "crane", "--history", "salet:20100"], "not both"),
    (["--history", "salet20100"], "must look like word:20100"),
    (["--history", "salet:2010"], "must have 5 tiles"),
    (["--history", "salet:22220,crane:22222"], "fits the feedback"),
])
def test_bad_input_is_one_error_line_and_exit_2(tiny_model_dir, args, message):  # noqa: F811
    result = run("play", "--model", str(tiny_model_dir), *args)
    assert result.exit_code == 2, result.output
    assert result.output.count("error:") == 1 and message in result.output and "Traceback" not in result.output


def test_a_missing_model_or_none_is_one_error_line(tmp_path):
    for args, message in ((["--model", str(tmp_path / "missing"), "--word", "crane"], "model folder not found"),
                          (["--word", "crane"], "--model PATH|default")):
        result = run("play", *args)
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error:") and message in result.output and len(result.output.splitlines()) == 1
