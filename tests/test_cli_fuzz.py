"""Property-based fuzzing of the CLI as a careless user would drive it: random words, feedback, flag
values and file contents. Every run either works (exit 0) or ends in exactly one `error:` line with
exit 2: never a traceback, never another exit code."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cli import cli
from solver.words import default_word_lists

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WORDS = default_word_lists().allowed[::97]
TILES = st.text(alphabet="012gybx-.GYB3z[]/", min_size=0, max_size=7)
NOISE = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
TOKEN = st.one_of(st.sampled_from(WORDS), NOISE, st.sampled_from(["[red]", "[/]", "[bold]x", "\\", ":", ","]))


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def assert_works_or_one_error(result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        return
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr


@FUZZ
@given(st.lists(st.tuples(TOKEN, st.sampled_from([":", "", "::", " : "]), TILES), max_size=7),
       st.sampled_from([",", ", ", ";", ",,"]))
def test_solve_history(turns, separator):
    history = separator.join(f"{word}{colon}{tiles}" for word, colon, tiles in turns)
    result = run("solve", "--history", history)
    assert_works_or_one_error(result)
    if result.exit_code == 0:
        assert any(text in result.output for text in ("Next guess:", "Solved in", "No guesses left"))


@FUZZ
@given(st.one_of(st.sampled_from(WORDS), NOISE))
def test_solve_word(word):
    assert_works_or_one_error(run("solve", "--word", word))


@FUZZ
@given(st.lists(st.one_of(st.tuples(st.sampled_from(WORDS), TILES).map(" ".join), TILES, NOISE), max_size=6))
def test_interactive_solve_never_crashes(lines):
    result = run("solve", input="\n".join(lines) + "\n")
    assert result.exit_code == 0 and result.exception is None, result.output


NUMBER = st.one_of(st.integers(-10**25, 10**25).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
                   st.sampled_from(["nan", "-inf", "1e309", "0x10", "", " ", "1_000", "٣"]))


@FUZZ
@given(st.sampled_from([
    ["eval", "--model", "{tmp}/no-model", "--temperature"], ["eval", "--model", "{tmp}/no-model", "--top-p"],
    ["eval", "--model", "{tmp}/no-model", "--max-tokens"], ["eval", "--model", "{tmp}/no-model", "--seed"],
    ["gen-sft", "--out", "{tmp}/d", "--answers", "{tmp}/no-list", "--games"],
    ["gen-sft", "--out", "{tmp}/d", "--answers", "{tmp}/no-list", "--rejected"],
    ["gen-sft", "--out", "{tmp}/d", "--answers", "{tmp}/no-list", "--off-policy"],
    ["sft", "--data", "{tmp}/no-data", "--out", "{tmp}/s", "--lr"],
    ["sft", "--data", "{tmp}/no-data", "--out", "{tmp}/s", "--iters"],
    ["rl", "--model", "{tmp}/no-model", "--out", "{tmp}/r", "--lr"],
    ["rl", "--model", "{tmp}/no-model", "--out", "{tmp}/r", "--group-size"],
    ["pipeline", "--model", "{tmp}/no-model", "--out", "{tmp}/p", "--group-size"],
    ["pipeline", "--model", "{tmp}/no-model", "--out", "{tmp}/p", "--sft-games"],
]), NUMBER)
def test_flag_values(command, value):
    """Each command names a missing model, list or data folder, so whatever the value it must stop in one line."""
    with tempfile.TemporaryDirectory() as tmp:
        result = run(*(part.format(tmp=tmp) for part in command), value)
        assert result.exit_code == 2
        assert_works_or_one_error(result)
        assert list(Path(tmp).iterdir()) == []


JSON_VALUE = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                     max_size=4), max_leaves=12)
EVAL_LIKE = st.fixed_dictionaries({"games": JSON_VALUE, "histogram": JSON_VALUE},
                                  optional={"wins": JSON_VALUE, "win_rate": JSON_VALUE, "per_game": JSON_VALUE,
                                            "mean_guesses": JSON_VALUE})
CONTENT = st.one_of(st.binary(max_size=64), JSON_VALUE.map(json.dumps).map(str.encode),
                    EVAL_LIKE.map(json.dumps).map(str.encode))


@FUZZ
@given(CONTENT)
def test_eval_compare_file_contents(content):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result.json"
        path.write_bytes(content)
        assert_works_or_one_error(run("eval", "--compare", path, path))


@FUZZ
@given(CONTENT, st.sampled_from(["config.json", "config.yaml"]))
def test_rl_config_contents(content, name):
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / name
        config.write_bytes(content)
        result = run("rl", "--config", config, "--model", Path(tmp) / "no-model", "--out", Path(tmp) / "run")
        assert result.exit_code == 2
        assert_works_or_one_error(result)
        assert not (Path(tmp) / "run").exists()


@FUZZ
@given(st.lists(st.one_of(CONTENT, st.fixed_dictionaries(
    {"step": JSON_VALUE}, optional={"phase": JSON_VALUE, "loss": JSON_VALUE, "reward_mean": JSON_VALUE,
                                    "games": JSON_VALUE, "wins": JSON_VALUE, "heldout_games": JSON_VALUE,
                                    "heldout_wins": JSON_VALUE}).map(json.dumps).map(str.encode)), max_size=4))
@example([b'{"step": 0, "heldout_games": []}'])  # found by this test: a list where a count belongs
def test_report_metrics_contents(lines):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "metrics.jsonl").write_bytes(b"\n".join(lines))
        assert_works_or_one_error(run("report", tmp))
