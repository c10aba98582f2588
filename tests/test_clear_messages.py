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


def notes_then_error(result) -> tuple[list[str], str]:
    """The `note:` lines a run printed before it stopped on its one `error:` line (exit 2, no traceback)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and lines and lines[-1].startswith("error:"), result.output
    assert "Traceback" not in result.output and all(line.startswith("note: ") for line in lines[:-1]), result.output
    return lines[:-1], lines[-1]


@pytest.fixture
def start(tmp_path):
    """An adapter folder with a naming head beside it, as far as the flags' notes look (no model loads)."""
    from llm.naming_head import HEAD_FILE

    folder = tmp_path / "start"
    folder.mkdir()
    (folder / "adapters.safetensors").write_bytes(b"")
    (folder / "adapter_config.json").write_text(json.dumps({"num_layers": 2}))
    (folder / HEAD_FILE).write_bytes(b"")
    return folder


def test_every_flag_the_run_leaves_unread_gets_a_note(tmp_path, start):
    """Issue 85: `rl` with a head beside the adapter took --lr, --group-size and --kl-coef into its
    config.json and trained the head with its own; LoRA RL took --head-games, --head-params; the
    pipeline from an SFT start took the from-scratch flags and from scratch the start's; eval took
    --no-naming-head with no adapter. One note for each, naming the flag, before the run's work
    (here it then stops on the missing model)."""
    model = tmp_path / "no-model"
    head_rl = "the start adapter has a naming head, so rl trains the head (head RL), not a LoRA (--head off trains " \
              "the LoRA)"
    notes, _ = notes_then_error(run("rl", "--model", model, "--adapter", start, "--out", tmp_path / "rl1", "--lr", 1e-4,
                                    "--group-size", 8, "--kl-coef", 0.1, "--head-games", 4))
    assert notes == [f"note: {name} has no effect: {head_rl}" for name in ("--group-size", "--lr", "--kl-coef")]
    (start / "naming_head.npz").unlink()
    notes, _ = notes_then_error(run("rl", "--model", model, "--adapter", start, "--out", tmp_path / "rl2",
                                    "--head-games", 4, "--head-params", "arrays", "--lr", 1e-4))
    lora_rl = "rl trains a LoRA here (the start adapter has no naming head); head RL trains a naming head fitted on " \
              "--adapter (naming-head)"
    assert notes == [f"note: {name} has no effect: {lora_rl}" for name in ("--head-games", "--head-params")]

    notes, _ = notes_then_error(run("pipeline", "--model", model, "--sft-start", start, "--out", tmp_path / "p1",
                                    "--sft-iters", 3, "--naming-head", 5, "--rl-steps", 2, "--group-size", 8,
                                    "--start-head", 4))
    from_start = f"this run starts from an SFT adapter ({start}), fits a naming head on it and trains the head " \
                 "(--start-head, --head-rl-steps, --head-games)"
    assert notes == [f"note: {name} has no effect: {from_start}"
                     for name in ("--sft-iters", "--rl-steps", "--group-size", "--naming-head")]
    notes, _ = notes_then_error(run("pipeline", "--model", model, "--sft-start", "scratch", "--out", tmp_path / "p2",
                                    "--start-head", 4, "--head-rl-steps", 2, "--eval-start-head", "--sft-iters", 3))
    scratch = "this run's SFT is from scratch: gen-sft, LoRA SFT and LoRA RL"
    assert notes == [f"note: {name} has no effect: {scratch}"
                     for name in ("--start-head", "--eval-start-head", "--head-rl-steps")]
    assert not any((tmp_path / name).exists() for name in ("rl1", "rl2", "p1", "p2"))

    notes, _ = notes_then_error(run("eval", "--model", model, "--no-naming-head", "--games", 1, "--quiet"))
    assert notes == ["note: --no-naming-head has no effect: without --adapter there is no naming head (naming-head "
                     "saves one beside an adapter)"]


def test_head_on_without_an_adapter_says_so(tmp_path):
    """Issue 85: it said "the start adapter None has no naming head"."""
    assert_one_error(run("rl", "--head", "on", "--out", tmp_path / "rl"),
                     "head.train is on (--head on) but no start adapter is given: head RL trains the naming head "
                     "beside one; give --adapter DIR after running naming-head --adapter DIR")
    assert not (tmp_path / "rl").exists()


def test_states_naming_an_adapter_file_is_refused_as_that_file(start):
    """Issue 85: `naming-head --states ADAPTER/adapters.safetensors` was "not a naming states file" with
    the advice to delete it (the adapter's own weights)."""
    for name in ("adapters.safetensors", "adapter_config.json", "naming_head.npz"):
        assert_one_error(run("naming-head", "--model", "unused", "--adapter", start, "--states", start / name),
                         f"--states {start / name} is the adapter's own {name}, not a states file: give another "
                         f"--states file, or leave it out for {start / 'naming_states.npz'}")
    assert sorted(p.name for p in start.iterdir()) == ["adapter_config.json", "adapters.safetensors", "naming_head.npz"]


def test_a_states_file_that_cannot_be_written_is_refused_before_the_model_loads(tmp_path, start):
    """Issue 85: a --states path that cannot be written was found only after the model had loaded and
    computed the first states (here the model is missing: the write is refused first)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    states = blocker / "states.npz"
    assert_one_error(run("naming-head", "--model", tmp_path / "no-model", "--adapter", start, "--states", states,
                         "--positions", 2, "--validation-positions", 1, "--quiet"),
                     f"cannot write {states}: {blocker} is not a folder")
