import json
import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input)


def test_solve_word_plays_to_a_win(tmp_path):
    out = tmp_path / "game.json"
    result = run("solve", "--word", "crane", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "CRANE: solved in" in result.output
    game = json.loads(out.read_text())
    assert game["won"] and game["turns"][-1]["guess"] == "crane" and game["turns"][-1]["pattern"] == "22222"
    assert game["turns"][0]["candidates_before"] == 2315
    assert all(t["candidates_after"] <= t["candidates_before"] for t in game["turns"])
    assert game["guesses"] == len(game["turns"]) <= 6


def test_solve_history_gives_next_guess(tmp_path):
    out = tmp_path / "advice.json"
    result = run("solve", "--history", "crane:gbbbb,slimy:bbbbb", "--json", str(out))
    assert result.exit_code == 0, result.output
    advice = json.loads(out.read_text())
    assert advice["remaining"] == len(advice["candidates"]) or advice["remaining"] > 12
    assert all(w.startswith("c") and not set(w) & set("ranesliy") for w in advice["candidates"])
    assert advice["next_guess"] and f"Next guess: {advice['next_guess'].upper()}" in result.output


def test_interactive_assistant_reads_feedback():
    result = run("solve", input="salet bbbbb\nbogus\n00000\nq\n")
    assert result.exit_code == 0, result.output
    assert result.output.count("Next guess:") >= 3
    assert "error:" in result.output  # 'bogus' is rejected, the session goes on


@pytest.mark.parametrize("args, message", [
    (["solve", "--word", "cran"], "has 4 letters"),
    (["solve", "--word", ""], "--word is empty"),  # not the interactive assistant
    (["solve", "--word", " ", "--history", "salet:20100"], "not both"),
    (["solve", "--word", "cr4ne"], "must be 5 letters a-z"),
    (["solve", "--word", "zzzzz"], "not in the allowed word list"),
    (["solve", "--word", "aahed"], "not in the answers list"),
    (["solve", "--history", "salet:2010"], "must have 5 tiles"),
    (["solve", "--history", "salet20100"], "must look like word:20100"),
    (["solve", "--history", "salet:22220,crane:22222"], "fits the feedback"),
    (["solve", "--history", "salet:00000,salet:22222"], "fits the feedback"),
    (["solve", "--answers", "/nonexistent/a.txt"], "cannot read word list"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    result = run(*args)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output


def test_eval_solver_sample_wins_and_writes_json(tmp_path):
    out = tmp_path / "eval.json"
    result = run("eval", "--policy", "solver", "--games", "60", "--seed", "3", "--json", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    for key in ("games", "wins", "win_rate", "mean_guesses", "max_guesses", "histogram", "seconds"):
        assert key in data
    assert data["games"] == 60 and data["wins"] == 60 and data["win_rate"] == 1.0
    assert set(data["histogram"]) == {"1", "2", "3", "4", "5", "6", "X"}
    assert sum(data["histogram"].values()) == 60 and data["histogram"]["X"] == 0
    assert len({g["secret"] for g in data["per_game"]}) == 60
    assert 3.0 < data["mean_guesses"] < 4.0
    again = run("eval", "--games", "60", "--seed", "3", "--json", str(tmp_path / "b.json"), "--quiet")
    assert [g["secret"] for g in json.loads((tmp_path / "b.json").read_text())["per_game"]] == \
        [g["secret"] for g in data["per_game"]]
    shown = run("eval", "--compare", str(out), str(tmp_path / "b.json"))
    assert shown.exit_code == 0 and "same secrets: wins" in shown.output


def test_eval_small_user_lists_all_modes(small_lists_files):
    answers, allowed = small_lists_files
    for extra in ([], ["--hard"], ["--lookahead"]):
        result = run("eval", "--answers", str(answers), "--allowed", str(allowed), "--quiet", *extra)
        assert result.exit_code == 0, result.output
        assert "100.0%" in result.output


def test_eval_compare_rejects_non_results(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    result = run("eval", "--compare", str(bad), str(bad))
    assert result.exit_code == 2 and "not an eval result" in result.output


def test_interactive_assistant_survives_blank_lines_and_markup():
    typed = "\n   \nsalet [/]\n[red]x[/red] 20100\nsalet 20100 extra\nsalet 20100\nq\n"
    result = run("solve", input=typed)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "feedback '[/]' must have 5 tiles" in result.output  # the user's text, not read as markup
    assert "'[red]x[/red]' has 12 letters" in result.output
    assert "type a guess and its feedback" in result.output
    assert result.output.count("Next guess:") == 2  # the opening advice, then after salet 20100


def test_interactive_assistant_ends_at_end_of_input():
    result = run("solve", input="salet 20100\n")
    assert result.exit_code == 0, result.output
    assert result.output.count("Next guess:") == 2 and result.output.endswith("\n")


def test_interactive_assistant_with_closed_stdin_is_one_line():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "cli.py", "solve"], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, cwd=Path(__file__).parent.parent, preexec_fn=lambda: os.close(0))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "error: standard input is closed: type the feedback at the prompt, or use --history"


def test_readme_history_example_runs():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    line = next(row for row in readme.splitlines() if "solve --history" in row)
    command = shlex.split(line.split("`")[1])
    assert command[:3] == ["python", "cli.py", "solve"]
    result = run(*command[2:])
    assert result.exit_code == 0, result.output
    assert "2 word(s) remain: scold, scowl" in result.output and "Next guess:" in result.output
