"""Playing with a language model through the eval harness (tiny random model)."""

import json

import pytest
from click.testing import CliRunner
from tiny_model import cached_tiny_model

from cli import cli
from eval.harness import MAX_INVALID_IN_A_ROW, evaluate, play_games
from eval.splits import held_out, is_held_out
from llm.format import (NO_TAGS, NOT_ALLOWED, NOT_FIVE_LETTERS, Move, Rejection, format_answer, parse_answer,
                        render_state)
from llm.generation import SamplingSettings
from llm.loading import load_model
from llm.player import ModelPlayer
from solver.setup import load_setup


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return cached_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def setup():
    return load_setup("answers")


class TextPlayer:
    """Answers with fixed text per turn number: exercises the harness rules exactly."""

    name = "scripted"

    def __init__(self, answers):
        self.answers = answers
        self.refused_seen = []  # the `rejected` argument of every call, per game

    def moves(self, states, rejected):
        self.refused_seen.append(rejected)
        out = []
        for state in states:
            text = self.answers(state)
            parsed = parse_answer(text, state.lists, state.guesses)
            out.append(Move(parsed.guess, text, parsed.failure))
        return out


def test_games_end_after_six_guesses(setup):
    player = TextPlayer(lambda s: format_answer("x", s.lists.allowed[(len(s.turns) * 997) % 12972]))
    summary, games = evaluate(player, setup, ["zesty", "aback"], show_progress=False)
    assert all(len(g.state.turns) == 6 and not g.state.won for g in games)
    assert summary["histogram"]["X"] == 2 and summary["win_rate"] == 0.0
    assert summary["format_valid_rate"] == 1.0 and summary["answers"] == 12


def test_three_invalid_in_a_row_lose(setup):
    player = TextPlayer(lambda s: "<think>x</think><guess>qqqqq</guess>")
    summary, games = evaluate(player, setup, ["crane"], show_progress=False)
    assert summary["refused_again_rate"] == 1.0  # qqqqq, refused, then qqqqq twice more
    assert len(games[0].moves) == MAX_INVALID_IN_A_ROW and games[0].moves[0].failure == NOT_ALLOWED
    assert summary["lost_to_invalid"] == 1 and summary["invalid_word_rate"] == 1.0


def test_refused_answers_reach_the_next_prompt_until_a_guess_is_played(setup):
    script = iter(["<think>x</think><guess>tone</guess>", "no tags", format_answer("x", "salet")])
    player = TextPlayer(lambda s: next(script, format_answer("x", s.candidate_words()[0])))
    summary, _ = evaluate(player, setup, ["crane"], show_progress=False)
    assert summary["refused_again_rate"] == 0.0  # after tone: no tags (no word); after that: salet
    seen = [refused[0] for refused in player.refused_seen]
    assert seen[0] == ()
    assert seen[1] == (Rejection("tone", NOT_FIVE_LETTERS),)
    assert seen[2] == (Rejection("tone", NOT_FIVE_LETTERS), Rejection(None, NO_TAGS))
    assert seen[3] == ()  # salet was played: a new turn starts with a clean slate
    assert render_state(setup.start, seen[2]) == (
        "This is the first guess. Not accepted: tone (not 5 letters), an answer (no <guess> tag). "
        "You have 6 guesses left. What is your guess?")


def test_repeats_and_consistency_are_measured(setup):
    repeated = []

    def answer(state):
        if not state.turns:
            return format_answer("x", "salet")
        if not repeated:
            repeated.append(True)
            return format_answer("x", "salet")
        return format_answer("x", state.candidate_words()[0])

    summary, games = evaluate(TextPlayer(answer), setup, ["crane"], show_progress=False)
    moves = games[0].moves
    assert moves[1].failure == "already_guessed"  # salet again is not played
    assert summary["repeat_rate"] == 0.2  # 1 of 5 answers
    assert games[0].state.won and len(games[0].state.turns) == 4
    assert summary["consistency_rate"] == 1.0
    assert summary["later_consistency_rate"] == 1.0  # the 3 guesses after the opener


def test_consistency_after_the_opener_leaves_the_opener_out(setup):
    def answer(state):
        return format_answer("x", "salet" if not state.turns else "zzzzz" if len(state.turns) == 2 else "pzazz")

    summary, games = evaluate(TextPlayer(answer), setup, ["crane"], show_progress=False)
    played = [m for m in games[0].moves if m.failure is None]
    assert [m.guess for m in played] == ["salet", "pzazz"] and played[1].consistent is False
    assert summary["consistency_rate"] == 0.5  # the opener counts, and always fits
    assert summary["later_consistency_rate"] == 0.0


def test_tiny_model_plays_batched_games_with_distinct_secrets(tiny, setup):
    model, tokenizer = load_model(str(tiny))
    player = ModelPlayer(model, tokenizer, "tiny", SamplingSettings(max_tokens=24), seed=0, batch_size=8)
    secrets = held_out(setup.lists.answers)[:8]
    summary, games = evaluate(player, setup, secrets, show_progress=False)
    assert [g.secret for g in games] == secrets and len(set(secrets)) == 8
    for game in games:  # a random model loses every game to invalid answers, after exactly 3 tries
        assert game.over and not game.state.won
        assert len(game.moves) == 3 and all(m.text is not None for m in game.moves)
    assert summary["games"] == 8 and summary["wins"] == 0 and summary["format_valid_rate"] == 0.0


def test_model_games_do_not_depend_on_the_batch_or_the_other_games(tiny, setup):
    """A game's answers draw from its own keys (seed, game, answer): the same games at batch sizes
    8 and 3, and a game played among others or alone, give the same records; another seed others."""
    model, tokenizer = load_model(str(tiny))
    secrets = held_out(setup.lists.answers)[:6]
    warm = SamplingSettings(temperature=1.0, max_tokens=16)

    def games(batch_size: int, seed: int = 0, chosen: list[str] = secrets) -> list[dict]:
        player = ModelPlayer(model, tokenizer, "tiny", warm, seed=seed, batch_size=batch_size)
        return [g.to_json() for g in play_games(player, setup, chosen, show_progress=False)]

    wide = games(8)
    assert games(3) == wide
    assert games(1, chosen=secrets[:1]) == wide[:1]
    assert games(8, seed=1) != wide


def test_eval_model_cli_json_and_heldout(tiny, tmp_path):
    out = tmp_path / "model.json"
    result = CliRunner().invoke(cli, ["eval", "--model", str(tiny), "--games", "6", "--seed", "1",
                                      "--max-tokens", "16", "--json", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    for key in ("games", "wins", "win_rate", "mean_guesses", "max_guesses", "histogram", "seconds",
                "format_valid_rate", "invalid_word_rate", "repeat_rate", "consistency_rate",
                "later_consistency_rate", "mean_regret_bits", "mean_regret_expected_left", "games_per_minute"):
        assert key in data
    secrets = [g["secret"] for g in data["per_game"]]
    assert data["split"] == "heldout" and len(set(secrets)) == 6 and all(map(is_held_out, secrets))
    solver = data["solver_same_secrets"]  # the solver on the same secrets, to read the model's beside
    assert solver["wins"] == 6 and solver["histogram"]["X"] == 0 and sum(solver["histogram"].values()) == 6
    assert 1 <= solver["mean_guesses"] <= 6


@pytest.mark.parametrize("args, message", [
    (["eval", "--model", "/nonexistent/model"], "/nonexistent/model"),
    (["eval", "--policy", "model"], "needs --model"),
    (["eval", "--model", "TINY", "--adapter", "/nonexistent/adapter"], "adapter"),
])
def test_model_eval_bad_input(tiny, args, message):
    result = CliRunner().invoke(cli, [str(tiny) if a == "TINY" else a for a in args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]


def test_heldout_split_is_a_stable_tenth(setup):
    words = held_out(setup.lists.answers)
    assert 180 < len(words) < 290
    assert words == held_out(setup.lists.answers)


def test_flags_the_player_does_not_read_get_a_note(tiny, tmp_path):
    out = tmp_path / "model.json"
    result = CliRunner().invoke(cli, ["eval", "--model", str(tiny), "--games", "2", "--max-tokens", "8", "--quiet",
                                      "--lookahead", "--hard", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stderr == "note: --hard, --lookahead have no effect: a model plays\n"
    assert json.loads(out.read_text())["hard"] is False  # the record says what was played
    result = CliRunner().invoke(cli, ["eval", "--policy", "solver", "--games", "2", "--temperature", "0.5", "--quiet"])
    assert result.exit_code == 0 and result.stderr == "note: --temperature has no effect: the solver plays\n"


def test_games_beyond_the_split_are_capped_with_a_note(tmp_path, setup, capsys):
    from eval.validation import HeldOutEval

    evals = HeldOutEval(setup, 100_000, 0)  # sft --eval-games, rl's eval_games
    assert capsys.readouterr().err == (f"note: held-out evals play all {len(evals.secrets)} validation secrets, "
                                       "fewer than the 100000 games asked for\n")
    words = tmp_path / "words.txt"
    words.write_text("crane\nslate\ntrace\n")
    result = CliRunner().invoke(cli, ["eval", "--answers", str(words), "--allowed", str(words), "--games", "10",
                                      "--quiet"])
    assert result.exit_code == 0, result.output
    assert result.stderr == "note: --games 10: the all split has 3 secrets; all of them are played\n"
    result = CliRunner().invoke(cli, ["eval", "--games", "5", "--quiet"])  # within the list: no note
    assert result.exit_code == 0 and result.stderr == ""
