"""--dtype: bf16 (or fp16) base weights with float32 adapters, loss and log-probs, on every command."""

import json

import mlx.core as mx
import pytest
from click.testing import CliRunner
from mlx.utils import tree_flatten

from cli import cli
from llm.loading import load_model, resolve_dtype
from llm_fixtures import tiny_model_dir  # noqa: F401
from common.errors import UserError
from rl.policy import load_policy
from sft.lora import AdapterSettings
from test_sft import data_dir, conversations  # noqa: F401


def dtypes(params) -> dict[str, mx.Dtype]:
    return {name: p.dtype for name, p in tree_flatten(params)}


def test_auto_is_float32_on_a_cpu_and_bfloat16_on_a_gpu():
    assert resolve_dtype("auto", mx.Device(mx.cpu)) == mx.float32
    assert resolve_dtype("auto", mx.Device(mx.gpu)) == mx.bfloat16
    assert resolve_dtype("float16") == mx.float16
    with pytest.raises(UserError, match="--dtype"):
        resolve_dtype("float64")


def test_base_weights_take_the_dtype_and_adapters_stay_float32(tiny_model_dir, tmp_path):  # noqa: F811
    policy = load_policy(str(tiny_model_dir), None, AdapterSettings(rank=2), "bfloat16")
    kinds = dtypes(policy.model.parameters())
    assert {d for n, d in kinds.items() if "lora_" not in n} == {mx.bfloat16}
    assert {d for n, d in kinds.items() if "lora_" in n} == {mx.float32}
    exported = policy.export(tmp_path / "adapter")
    assert {p.dtype for p in mx.load(str(exported / "adapters.safetensors")).values()} == {mx.float32}
    # An adapter applied at load time keeps float32 as well.
    model, _ = load_model(str(tiny_model_dir), exported, "bfloat16")
    assert {d for n, d in dtypes(model.parameters()).items() if "lora_" in n} == {mx.float32}


def test_sft_in_bfloat16_trains_a_float32_adapter(tiny_model_dir, data_dir, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["sft", "--model", str(tiny_model_dir), "--data", str(data_dir), "--out", str(out),
                                      "--iters", "3", "--batch-size", "2", "--lr", "3e-3", "--eval-games", "0",
                                      "--dtype", "bfloat16", "--quiet"])
    assert result.exit_code == 0, result.output
    losses = [json.loads(line).get("loss") for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(loss is None or loss == loss for loss in losses)  # no NaN
    weights = mx.load(str(out / "adapter" / "adapters.safetensors"))
    assert weights and {p.dtype for p in weights.values()} == {mx.float32}


@pytest.mark.parametrize("command", [["eval", "--games", "1"], ["rl", "--out", "OUT", "--steps", "1"],
                                     ["sft", "--data", "DATA", "--out", "OUT"]])
def test_a_bad_dtype_is_one_line_and_exit_2(command, tiny_model_dir, tmp_path):  # noqa: F811
    args = [a.replace("OUT", str(tmp_path / "o")).replace("DATA", str(tmp_path)) for a in command]
    result = CliRunner().invoke(cli, [*args, "--model", str(tiny_model_dir), "--dtype", "float64"])
    assert result.exit_code == 2 and result.output.count("error:") == 1, result.output
    assert "dtype" in result.output
