"""Files a user hands the commands that are binary, unreadable or hold the wrong JSON types:
one `error:` line and exit 2 naming the file, never a UnicodeDecodeError or ValueError traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli
from llm_fixtures import tiny_model_dir  # noqa: F401
from test_bad_output import CHMOD_DENIES, assert_one_error

BINARY = bytes(range(256)) * 4  # not UTF-8


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def eval_result(**changes) -> dict:
    result = {"policy": "solver", "secrets": "answers", "games": 2, "wins": 2, "win_rate": 1.0,
              "mean_guesses": 3.5, "histogram": {"1": 0, "2": 0, "3": 1, "4": 1, "5": 0, "6": 0, "X": 0},
              "per_game": [{"secret": "crane", "won": True}, {"secret": "slate", "won": True}]}
    return {**result, **changes}


def write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_binary_config_is_one_line(tmp_path, suffix):
    config = write(tmp_path / f"config{suffix}", BINARY)
    assert_one_error(run("rl", "--config", config, "--out", tmp_path / "rl"), "is not UTF-8 text")
    assert not (tmp_path / "rl").exists()


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "expected an object, got a list"),
    ("{", "not valid JSON"),
    ('{"steps": "many"}', "steps must be a whole number, got 'many'"),
    ("[" * 100_000, "nested too deeply"),
])
def test_bad_json_config_is_one_line(tmp_path, content, message):
    config = write(tmp_path / "config.json", content)
    assert_one_error(run("rl", "--config", config, "--out", tmp_path / "rl"), message)


@pytest.mark.parametrize("name, content, message", [
    ("train.jsonl", BINARY, "train.jsonl is not UTF-8 text"),
    ("train.jsonl", '{"messages": "hi"}\n', '"messages" must be a non-empty list'),
    ("train.jsonl", "[1]\n", 'expected an object with a "messages" list'),
    ("manifest.json", BINARY, "manifest.json is not UTF-8 text"),
    ("manifest.json", '{"secrets": {"train": "crane"}}', "secrets.train must be a list of words"),
    ("manifest.json", '{"secrets": [1]}', "secrets.train must be a list of words"),
])
def test_bad_sft_data_is_one_line(tmp_path, name, content, message):
    data = tmp_path / "data"
    write(data / "train.jsonl", '{"messages": [{"role": "user", "content": "q"}, '
                                '{"role": "assistant", "content": "a"}]}\n')
    write(data / name, content)
    assert_one_error(run("sft", "--data", data, "--out", tmp_path / "run", "--model", tmp_path / "no-model"),
                     message)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not CHMOD_DENIES, reason="root reads a file whatever its mode")
def test_unreadable_train_file_is_one_line(tmp_path):
    train = write(tmp_path / "data" / "train.jsonl", "{}\n")
    train.chmod(0)
    assert_one_error(run("sft", "--data", tmp_path / "data", "--out", tmp_path / "run"),
                     "cannot read data file", "Permission denied")


@pytest.mark.parametrize("content, message", [
    (BINARY, "is not UTF-8 text"),
    ("not json", "not valid JSON"),
    ('"text"', "expected an object, got a string"),
    (eval_result(wins="many"), "wins must be a whole number, got 'many'"),
    (eval_result(win_rate="all"), "win_rate must be a number, got 'all'"),
    (eval_result(games=True), "games must be a whole number, got True"),
    (eval_result(histogram={"1": "x"}), "histogram must map guesses to whole numbers"),
    (eval_result(histogram=[1, 2]), "histogram must map guesses to whole numbers"),
    (eval_result(per_game=[{"secret": "crane"}]), "per_game must list games"),
    (eval_result(per_game="none"), "per_game must list games"),
])
def test_bad_eval_result_for_compare_is_one_line(tmp_path, content, message):
    good = write(tmp_path / "good.json", eval_result())
    bad = write(tmp_path / "bad.json", content)
    assert_one_error(run("eval", "--compare", good, bad), str(bad), message)


def test_good_eval_results_compare(tmp_path):
    a = write(tmp_path / "a.json", eval_result())
    b = write(tmp_path / "b.json", eval_result(wins=1, per_game=[{"secret": "crane", "won": False}]))
    result = run("eval", "--compare", a, b)
    assert result.exit_code == 0, result.output
    assert "same secrets: wins" in result.output


@pytest.mark.parametrize("content, message", [
    (BINARY, "metrics.jsonl is not UTF-8 text"),
    ('{"step": "one", "loss": 1.0}\n', "step must be a whole number"),
    ('{"step": 1, "loss": "low"}\n', "step 1: loss must be a number, got 'low'"),
    ('{"step": 1, "phase": "grpo", "games": 2, "wins": "many", "reward_mean": 1.0}\n',
     "step 1: wins must be a number, got 'many'"),
    ('{"step": 1, "phase": 3}\n', "phase must be a name"),
])
def test_bad_metrics_log_for_report_is_one_line(tmp_path, content, message):
    write(tmp_path / "run" / "metrics.jsonl", content)
    assert_one_error(run("report", tmp_path / "run"), message)


def test_binary_checkpoint_pointer_is_one_line(tmp_path):
    data = tmp_path / "data"
    write(data / "train.jsonl", '{"messages": [{"role": "user", "content": "q"}, '
                                '{"role": "assistant", "content": "a"}]}\n')
    write(tmp_path / "run" / "latest", BINARY)
    assert_one_error(run("sft", "--data", data, "--out", tmp_path / "run", "--resume"),
                     "checkpoint pointer", "is not UTF-8 text")


@pytest.mark.parametrize("content, message", [
    (BINARY, "stages.json is not UTF-8 text"),
    ("[]", "expected an object, got a list"),
])
def test_bad_pipeline_record_is_one_line(tmp_path, tiny_model_dir, content, message):  # noqa: F811
    write(tmp_path / "p" / "stages.json", content)
    assert_one_error(run("pipeline", "--model", tiny_model_dir, "--out", tmp_path / "p"), message)
    # No stage ran (the run lock's file, common/run_lock.py, may stay: it holds nothing).
    assert sorted(p.name for p in (tmp_path / "p").iterdir() if p.name != ".lock") == ["stages.json"]


def test_pipeline_record_with_wrong_stage_types_is_one_line(tmp_path, tiny_model_dir):  # noqa: F811
    from dataclasses import asdict

    from rl.pipeline import PipelineSettings

    settings = asdict(PipelineSettings(model=str(tiny_model_dir)))
    write(tmp_path / "p" / "stages.json", {"settings": settings, "stages": {"gen-sft": "done"}})
    assert_one_error(run("pipeline", "--model", tiny_model_dir, "--out", tmp_path / "p"),
                     "stages must map each stage to its summary")


@pytest.mark.parametrize("content", [BINARY, "\n".join(["crane", "sl\x00te"])])
def test_bad_word_list_is_one_line(tmp_path, content):
    answers = write(tmp_path / "answers.txt", content)
    assert_one_error(run("solve", "--word", "crane", "--answers", answers), str(answers))


def test_byte_order_marks_are_stripped(tmp_path):
    """Windows editors start a UTF-8 file with one; it is not part of the first word or key."""
    answers = write(tmp_path / "answers.txt", "\ufeffcrane\nslate\n".encode("utf-8"))
    result = run("solve", "--word", "crane", "--answers", answers, "--allowed", answers)
    assert result.exit_code == 0, result.output
    config = write(tmp_path / "config.json", "\ufeff{\"steps\": 0}".encode())
    assert_one_error(run("rl", "--config", config, "--out", tmp_path / "rl"), "steps must be")


@pytest.mark.parametrize("name, content, message", [
    ("config.json", '{"steps": 1, "grpo": {"kl_coef": 0.1, "kl_coef": 0.2}}', 'the key "kl_coef" is given twice'),
    ("config.yaml", "steps: 1\nsteps: 2\n", "the key steps is given twice (line 2)"),
])
def test_duplicate_config_keys_are_one_line(tmp_path, name, content, message):
    """yaml and json would keep the last value silently."""
    config = write(tmp_path / name, content)
    assert_one_error(run("rl", "--config", config, "--out", tmp_path / "rl"), str(config), message)


@pytest.mark.parametrize("content, message", [
    (BINARY, "adapter_config.json is not UTF-8 text"),
    ("[1]", "adapter_config.json: expected an object, got a list"),  # not SimpleNamespace's complaint
])
def test_bad_adapter_config_is_one_line(tmp_path, tiny_model_dir, content, message):  # noqa: F811
    adapter = tmp_path / "adapter"
    write(adapter / "adapter_config.json", content)
    write(adapter / "adapters.safetensors", b"")
    data = tmp_path / "data"
    write(data / "train.jsonl", '{"messages": [{"role": "user", "content": "q"}, '
                                '{"role": "assistant", "content": "a"}]}\n')
    assert_one_error(run("sft", "--model", tiny_model_dir, "--data", data, "--adapter", adapter,
                         "--out", tmp_path / "run", "--iters", 1), message)


@pytest.mark.parametrize("files, message", [
    ({"adapters.safetensors": b""}, "--sft-start {start}: not an adapter folder (no adapter_config.json there); give "
                                    "auto, bundled, scratch or an SFT adapter folder"),
    ({"adapters.safetensors": b"", "adapter_config.json": BINARY}, "adapter_config.json is not UTF-8 text"),
    ({"adapters.safetensors": b"", "adapter_config.json": "{}"}, "is not an mlx-lm adapter config (no num_layers)"),
])
def test_a_pipeline_start_without_a_whole_adapter_config_is_one_line(tmp_path, files, message):
    """Issue 85: a start folder with weights and no adapter_config.json passed the check and ended in a
    46-line FileNotFoundError where the SFT stage copies it; a config that does not read is refused as early."""
    start = tmp_path / "start"
    for name, content in files.items():
        write(start / name, content)
    out = tmp_path / "run"
    assert_one_error(run("pipeline", "--model", tmp_path / "no-model", "--sft-start", start, "--out", out),
                     message.format(start=start))
    assert not out.exists()
