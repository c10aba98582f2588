"""Issue 63, wrong successes: stale or broken inputs are refused, not used as if they were whole.

Adapters load only whole (every tensor their config asks for), naming heads only whole and
finite, a naming states file only for the model and adapter that made it (one written before
files recorded that is taken, with a note).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)
from test_bad_output import assert_one_error
from test_naming_head import tiny_adapter  # noqa: F401  (fixture)
from test_sft import conversations, data_dir, tiny_args  # noqa: F401  (fixtures)

from cli import cli
from common.errors import UserError
from llm.adapter_files import ADAPTER_WEIGHTS, save_adapter
from llm.loading import load_model
from llm.naming_head import HEAD_FILE, NamingHead
from rl.naming_head import ORIGIN_KEY, RECORD_FILE, STATES_FILE
from rl.pipeline import GPU_RECIPE, STAGES_FILE, PipelineSettings
from sft.lora import AdapterSettings, attach_adapter, trainable_weights


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def eval_one_game(model, adapter):
    return run("eval", "--model", model, "--adapter", adapter, "--games", 1, "--max-tokens", 8, "--quiet")


@pytest.mark.parametrize("kept", [0.5, 0.0])
def test_an_adapter_without_all_its_tensors_is_refused(tiny_model_dir, tiny_adapter, kept):  # noqa: F811
    """mlx-lm loads what a file holds: half the tensors, or none, played as the bare model."""
    weights = mx.load(str(tiny_adapter / ADAPTER_WEIGHTS))
    names = sorted(weights)[:int(len(weights) * kept)]
    mx.save_safetensors(str(tiny_adapter / ADAPTER_WEIGHTS), {name: weights[name] for name in names})
    assert_one_error(eval_one_game(tiny_model_dir, tiny_adapter),
                     f"{tiny_adapter / ADAPTER_WEIGHTS} holds {len(names)} of the {len(weights)} tensors its "
                     "adapter config asks for", "use a whole adapter")


def test_a_whole_full_fine_tune_adapter_loads_and_half_of_one_is_refused(tiny_model_dir, tmp_path):  # noqa: F811
    model, _ = load_model(str(tiny_model_dir))
    config = attach_adapter(model, AdapterSettings(full=True))
    weights = trainable_weights(model)
    folder = save_adapter(tmp_path / "full", weights, config)
    load_model(str(tiny_model_dir), folder)
    mx.save_safetensors(str(folder / ADAPTER_WEIGHTS), dict(sorted(weights.items())[::2]))
    assert_one_error(eval_one_game(tiny_model_dir, folder), "tensors its adapter config asks for")


def head_arrays(hidden: int = 64, rank: int = 2) -> dict:
    return {"down": np.zeros((rank, hidden), np.float32), "up": np.zeros((hidden, rank), np.float32),
            "letters": np.zeros((156, hidden), np.float32), "beta": np.float64(0.01)}


@pytest.mark.parametrize("changes, message", [
    ({"up": np.full((64, 2), np.nan, np.float32)}, "holds NaN, infinite or out-of-range values"),
    ({"down": np.full((2, 64), 1e300)}, "holds NaN, infinite or out-of-range values"),  # inf in float32
    ({"beta": np.float64(np.nan)}, "holds NaN, infinite or out-of-range values"),
    ({"letters": np.ones((156, 64), np.int8)}, "must be tables of floats"),
    ({"beta": np.array([0.01, 0.02])}, "must be tables of floats and beta one float"),
    (None, "one array, not an .npz archive"),
    (b"garbage" * 50, "is not a naming head"),
])
def test_a_naming_head_that_is_not_whole_and_finite_is_refused(tiny_model_dir, tiny_adapter, changes,  # noqa: F811
                                                                message):
    path = tiny_adapter / HEAD_FILE
    if changes is None:
        np.save(open(path, "wb"), np.zeros(3))
    elif isinstance(changes, bytes):
        path.write_bytes(changes)
    else:
        np.savez(open(path, "wb"), **{**head_arrays(), **changes})
    assert_one_error(eval_one_game(tiny_model_dir, tiny_adapter), str(path), message, "fit it again with naming-head")


HEAD_FLAGS = ["--positions", 6, "--validation-positions", 3, "--epochs", 4, "--rank", 2, "--quiet"]


def test_a_states_file_is_tied_to_the_adapter_that_made_it(tiny_model_dir, tiny_adapter, tmp_path):  # noqa: F811
    """`naming-head` records the model and adapter in its states file; another adapter given the
    file (`--states`), or the same folder's adapter trained again, is refused in one line before the
    model loads, and a file written before states recorded it is taken with a note."""
    fit = run("naming-head", "--model", tiny_model_dir, "--adapter", tiny_adapter, *HEAD_FLAGS)
    assert fit.exit_code == 0, fit.output
    assert "note:" not in fit.stderr
    states = tiny_adapter / STATES_FILE
    with np.load(states) as saved:
        assert json.loads(str(saved[ORIGIN_KEY]))["model"] == str(tiny_model_dir)
        arrays = {key: saved[key] for key in saved.files}

    model, _ = load_model(str(tiny_model_dir))
    mx.random.seed(7)
    config = attach_adapter(model, AdapterSettings(rank=2))
    other = save_adapter(tmp_path / "other", trainable_weights(model), config)
    refused = run("naming-head", "--model", tiny_model_dir, "--adapter", other, "--states", states, *HEAD_FLAGS)
    assert_one_error(refused, f"{states} holds the states of another model or adapter",
                     "give another --states file, or delete it to compute them again")
    assert not (other / HEAD_FILE).exists()
    head = (tiny_adapter / HEAD_FILE).read_bytes()
    (tiny_adapter / ADAPTER_WEIGHTS).write_bytes((other / ADAPTER_WEIGHTS).read_bytes())  # retrained in place
    assert_one_error(run("naming-head", "--model", tiny_model_dir, "--adapter", tiny_adapter, *HEAD_FLAGS),
                     "holds the states of another model or adapter")
    assert (tiny_adapter / HEAD_FILE).read_bytes() == head

    del arrays[ORIGIN_KEY]  # as naming-head wrote it before issue 63
    np.savez(open(states, "wb"), **arrays)
    taken = run("naming-head", "--model", tiny_model_dir, "--adapter", tiny_adapter, *HEAD_FLAGS)
    assert taken.exit_code == 0, taken.output
    notes = [line for line in taken.stderr.splitlines() if line.strip()]
    assert notes == [f"note: {states} does not record the adapter its states were made with (written before files "
                     f"did): they are taken as those of --model {tiny_model_dir} and the adapter of sha256 "
                     f"{_sha256(tiny_adapter / ADAPTER_WEIGHTS)[:12]}"]


def _sha256(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def train_games(tmp_path_factory) -> dict:
    """The solver's eval of 4 training secrets: a games file that --from-games reads."""
    path = tmp_path_factory.mktemp("games") / "games.json"
    assert run("eval", "--games", 4, "--split", "train", "--quiet", "--json", path).exit_code == 0
    return {"path": path, "result": json.loads(path.read_text())}


def test_endgame_from_games_refuses_the_flags_it_does_not_read_and_labels_the_games_split(
        tiny_model_dir, train_games, tmp_path):  # noqa: F811
    """`eval --endgame --from-games F` answered F's positions whatever --split and --positions said,
    and labelled the result with the --split given."""
    args = ["eval", "--model", tiny_model_dir, "--endgame", "--from-games", train_games["path"], "--max-tokens", 8,
            "--quiet"]
    assert_one_error(run(*args, "--split", "test"), "--from-games answers every endgame position of its games: "
                                                   "--split does not apply; leave it out")
    assert_one_error(run(*args, "--split", "test", "--positions", 5), "--positions, --split do not apply")
    out = tmp_path / "endgame.json"
    assert run(*args, "--json", out).exit_code == 0
    assert json.loads(out.read_text())["split"] == "train" == train_games["result"]["split"]


def test_compare_refuses_nan_figures_results_without_a_shared_secret_and_the_flags_it_ignores(train_games,
                                                                                              tmp_path):
    games = train_games["result"]
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps({**games, "win_rate": float("nan")}))  # Python writes NaN; `nan%` was shown
    assert_one_error(run("eval", "--compare", train_games["path"], nan), f"{nan}: win_rate is NaN, not a figure",
                     "play the eval again")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**games, "per_game": [{**g, "secret": g["secret"][::-1]} for g in games["per_game"]]}))
    assert_one_error(run("eval", "--compare", train_games["path"], other),
                     f"--compare: {train_games['path']} and {other} share no secret")
    for flags in (["--model", "default"], ["--games", 3], ["--endgame"], ["--split", "test"]):
        assert_one_error(run("eval", "--compare", train_games["path"], train_games["path"], *flags),
                         f"--compare shows two results already played: {flags[0]} does not apply; leave it out")
    assert run("eval", "--compare", train_games["path"], train_games["path"], "--quiet").exit_code == 0


@pytest.mark.parametrize("every", ["abc", "0", "-5", "nan", "inf"])
def test_a_progress_interval_that_is_not_a_positive_number_is_one_note_and_30_s(every, monkeypatch):
    """WORDLE_RL_PROGRESS_EVERY=abc was ignored, 0, -5 and nan printed a line at every update; then it
    was an error, and every command failed on it, --help included (issue 85). Now one note, before
    any work, and plain lines every 30 s."""
    from common.progress import PLAIN_EVERY, plain_every

    result = CliRunner().invoke(cli, ["eval", "--help"], env={"WORDLE_RL_PROGRESS_EVERY": every})
    assert result.exit_code == 0 and "Usage:" in result.stdout
    assert result.stderr == (f"note: WORDLE_RL_PROGRESS_EVERY must be a number of seconds above 0 (e.g. 5), got "
                             f"{every!r}: plain progress lines come every 30 s\n")
    monkeypatch.setenv("WORDLE_RL_PROGRESS_EVERY", every)
    assert plain_every() == PLAIN_EVERY == 30


def test_sft_again_on_a_run_killed_before_its_first_checkpoint_says_it_starts_again(tmp_path, tiny_model_dir,  # noqa: F811
                                                                                    data_dir):  # noqa: F811
    """The same command, no --resume: the note the README promises (`rl` too: tests/test_rl.py)."""
    run_dir = tmp_path / "run"
    args = tiny_args(tiny_model_dir, data_dir, run_dir, "--iters", "1", "--eval-games", "0")
    assert run("sft", *args).exit_code == 0
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "latest").unlink()
    again = run("sft", *args)
    assert again.exit_code == 0, again.output
    assert again.stderr.splitlines() == [f"note: {run_dir} has no checkpoint yet; its run starts again from step 0"]


def test_a_fit_that_diverges_is_an_error_and_the_head_it_had_stays(tiny_model_dir, tiny_adapter):  # noqa: F811
    """Issue 85: `naming-head --beta 1e-300` printed `validation 0.000 -> nan`, exited 0 and replaced
    a good head with a NaN one. Below 1e-38 the fit breaks at once, so --beta starts at 1e-6; a fit
    that goes NaN within the range all the same (AdamW with --lr 1 --weight-decay 10) is one error."""
    NamingHead(**head_arrays()).save(tiny_adapter / HEAD_FILE)  # a good head, as a fit leaves it
    (tiny_adapter / RECORD_FILE).write_text("{}")
    kept = {name: (tiny_adapter / name).read_bytes() for name in (HEAD_FILE, RECORD_FILE)}
    assert_one_error(run("naming-head", "--model", tiny_model_dir, "--adapter", tiny_adapter, *HEAD_FLAGS,
                         "--beta", "1e-300"), "'--beta': 1e-300 is not in the range 1e-06<=x<=10")
    assert_one_error(run("naming-head", "--model", tiny_model_dir, "--adapter", tiny_adapter, *HEAD_FLAGS,
                         "--epochs", 20, "--lr", 1, "--weight-decay", 10),
                     "the naming head's fit diverged (NaN figures by epoch 20 with --lr 1, --weight-decay 10, --beta "
                     f"0.01): {tiny_adapter / HEAD_FILE} keeps the head it had; fit again with a lower --lr or "
                     "--weight-decay")
    assert {name: (tiny_adapter / name).read_bytes() for name in kept} == kept
    assert NamingHead.load(tiny_adapter / HEAD_FILE).beta == pytest.approx(0.01)


def test_a_changed_recipe_on_a_pipeline_run_is_refused_and_named(tmp_path):
    """Issue 85: `pipeline --out R --recipe gpu` on a CPU run exited 0 and went on with the CPU
    sizes, unsaid. A recipe that sets what the run has is fine (it stops at the missing model)."""
    model = str(tmp_path / "no-model")
    for recipe, other in (("cpu", "gpu"), ("gpu", "cpu")):
        out = tmp_path / recipe
        out.mkdir()
        settings = PipelineSettings(model=model, **(GPU_RECIPE if recipe == "gpu" else {}))
        (out / STAGES_FILE).write_text(json.dumps({"settings": asdict(settings), "stages": {}}))
        assert_one_error(run("pipeline", "--out", out, "--recipe", other),
                         f"{out} holds a pipeline run that continues as it started: its settings may not change (got "
                         "--recipe); choose another --out for a new run")
        assert_one_error(run("pipeline", "--out", out, "--recipe", recipe), f"model folder not found: {model}")


def test_the_bundled_starts_config_is_checked_before_anything_is_recorded(tmp_path, monkeypatch):
    """Issue 85: a bundled start whose adapter_config.json had its LoRA scale 20 -> 200 was used
    silently (only the weights' digest was checked), and a broken one was reported under the run's
    copy with the SFT stage recorded as done. Now it is one error naming the file in llm/sft_start/."""
    from llm.adapter_files import ADAPTER_CONFIG
    from llm.bundled_start import FOLDER, SHA256, copy_start, verified_start

    copy = copy_start(tmp_path / "start")
    config = json.loads((copy / ADAPTER_CONFIG).read_text())
    config["lora_parameters"]["scale"] = 200.0
    (copy / ADAPTER_CONFIG).write_text(json.dumps(config, indent=4))
    with pytest.raises(UserError, match=f"the bundled SFT start {copy / ADAPTER_CONFIG} is damaged or changed"):
        verified_start(copy)
    monkeypatch.setitem(SHA256, ADAPTER_CONFIG, "0" * 64)  # the shipped config no longer the one recorded
    out = tmp_path / "run"
    assert_one_error(run("pipeline", "--out", out), f"the bundled SFT start {FOLDER / ADAPTER_CONFIG} is damaged or "
                                                    "changed", "restore it (git checkout -- llm/sft_start)")
    assert not out.exists()
