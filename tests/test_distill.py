"""`distill`: the model's own next token at ` Only` trained toward its naming head's choice."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner

from cli import cli
from llm.adapter_files import save_adapter
from llm.loading import load_model
from llm_fixtures import tiny_model_dir  # noqa: F401
from sft.lora import AdapterSettings, attach_adapter, trainable_weights

HEAD_ARGS = ["--positions", "6", "--validation-positions", "3", "--epochs", "4", "--rank", "2", "--quiet"]
RUN_ARGS = ["--batch", "2", "--layers", "1", "--eval-every", "2", "--validation-positions", "3", "--train-positions",
            "3", "--quiet"]


@pytest.fixture(scope="module")
def headed_adapter(tiny_model_dir, tmp_path_factory):  # noqa: F811
    """A tiny adapter with a naming head fitted beside it."""
    model, _ = load_model(str(tiny_model_dir))
    mx.random.seed(0)
    config = attach_adapter(model, AdapterSettings(rank=2))
    folder = save_adapter(tmp_path_factory.mktemp("start") / "adapter", trainable_weights(model), config)
    result = CliRunner().invoke(cli, ["naming-head", "--model", str(tiny_model_dir), "--adapter", str(folder),
                                      *HEAD_ARGS])
    assert result.exit_code == 0, result.output
    return folder


def run(model_dir, adapter, out, *extra):
    return CliRunner().invoke(cli, ["distill", "--model", str(model_dir), "--adapter", str(adapter), "--out",
                                    str(out), *RUN_ARGS, *extra])


def test_the_model_learns_the_heads_first_tokens_where_it_was_taught(tiny_model_dir, headed_adapter):  # noqa: F811
    """Steps on the same positions bring the model's next token toward the head's distribution
    (the loss falls), with the LoRA's lower layers untouched and the teacher unchanged by training."""
    from llm.naming_head import NamingHead, head_beside
    from rl.distill import Teacher, distill_loss, lora_off, training_positions
    from rl.policy import load_policy
    import mlx.nn as nn
    import mlx.optimizers as optim

    mx.random.seed(0)
    policy = load_policy(str(tiny_model_dir), headed_adapter, AdapterSettings(rank=4))
    model = policy.model
    model.freeze()
    model.model.layers[-1].unfreeze(keys=["lora_a", "lora_b"], strict=False)
    teacher = Teacher(model, policy.tokenizer, NamingHead.load(head_beside(headed_adapter)), below=1)
    contexts = teacher.contexts(training_positions(0, 0)[:4])
    assert np.allclose(contexts.targets.sum(axis=1), 1.0, atol=1e-4)
    targets = mx.array(contexts.targets)
    loss_and_grad = nn.value_and_grad(model, lambda m: distill_loss(m, contexts.lower, targets, 1))
    optimizer = optim.Adam(learning_rate=1e-2)
    losses = []
    for _ in range(30):
        loss, grads = loss_and_grad(model)
        optimizer.update(model, grads)
        mx.eval(model.parameters(), optimizer.state)
        losses.append(float(loss))
    assert losses[-1] < 0.8 * losses[0]
    again = teacher.contexts(training_positions(0, 0)[:4])  # the teacher is the start: LoRA off
    np.testing.assert_allclose(again.targets, contexts.targets, atol=1e-5)
    with lora_off(model):
        assert all(m.scale == 0.0 for m in model.modules() if hasattr(m, "lora_a"))
    assert all(m.scale != 0.0 for m in model.modules() if hasattr(m, "lora_a"))


def test_distill_runs_keeps_the_best_on_validation_and_a_resumed_run_ends_as_an_uninterrupted_one(
        tiny_model_dir, headed_adapter, tmp_path):  # noqa: F811
    whole = tmp_path / "whole"
    result = run(tiny_model_dir, headed_adapter, whole, "--steps", "4", "--json", str(tmp_path / "s.json"))
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["positions_seen"] == 8 and [p["step"] for p in summary["curve"]] == [0, 2, 4]
    assert set(summary["head"]) == {"validation", "train"}
    for name in ("best", "adapter"):
        load_model(str(tiny_model_dir), str(whole / name))  # an ordinary adapter over the base model
    parted = tmp_path / "parted"
    assert run(tiny_model_dir, headed_adapter, parted, "--steps", "2").exit_code == 0
    result = run(tiny_model_dir, headed_adapter, parted, "--steps", "4")
    assert result.exit_code == 0 and "resuming" in result.output
    a = mx.load(str(whole / "adapter" / "adapters.safetensors"))
    b = mx.load(str(parted / "adapter" / "adapters.safetensors"))
    assert all(np.allclose(np.array(a[k]), np.array(b[k]), atol=1e-6) for k in a)


def test_distill_mistakes_are_one_line_and_exit_2(tiny_model_dir, headed_adapter, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    assert run(tiny_model_dir, headed_adapter, out, "--steps", "2").exit_code == 0
    result = run(tiny_model_dir, headed_adapter, out, "--steps", "3", "--lr", "0.5")
    assert result.exit_code == 2 and "lr" in result.output and "Traceback" not in result.output
    result = run(tiny_model_dir, headed_adapter, out, "--steps", "0")
    assert result.exit_code == 2
