"""Issue 63, wrong successes: stale or broken inputs are refused, not used as if they were whole.

Adapters load only whole (every tensor their config asks for), naming heads only whole and
finite, a naming states file only for the model and adapter that made it (one written before
files recorded that is taken, with a note).
"""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)
from test_bad_output import assert_one_error
from test_naming_head import tiny_adapter  # noqa: F401  (fixture)

from cli import cli
from llm.adapter_files import ADAPTER_WEIGHTS, save_adapter
from llm.loading import load_model
from llm.naming_head import HEAD_FILE
from rl.naming_head import ORIGIN_KEY, STATES_FILE
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
