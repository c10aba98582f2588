"""Shared pytest fixtures for tests that need a model.

Use in a test module with `from llm_fixtures import tiny_model_dir  # noqa: F401`
(pytest puts tests/ on sys.path), then take `tiny_model_dir` as an argument.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest
from click.testing import CliRunner
from mlx.utils import tree_flatten
from mlx_lm.tuner.utils import linear_to_lora_layers
from tiny_model import cached_tiny_model

from llm.loading import load_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama folder (2 layers, hidden 64, ~400-token BPE), built once per session."""
    return cached_tiny_model(tmp_path_factory.getbasetemp() / "models")


def run_benchmark(command, model_dir: Path, args: list[str], out: Path) -> dict:
    """Run a benchmark's click command on a model folder with `--json out`; the report it wrote."""
    result = CliRunner().invoke(command, ["--model", str(model_dir), *args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def write_lora_adapter(model_dir: Path, out: Path) -> dict[str, mx.array]:
    """A LoRA adapter exactly as mlx-lm's trainer saves one, with non-zero weights."""
    model, _ = load_model(str(model_dir))
    lora = {"rank": 4, "scale": 10.0, "dropout": 0.0}
    model.freeze()
    linear_to_lora_layers(model, 2, lora)
    mx.random.seed(3)
    adapter = {
        name: mx.random.normal(p.shape) * 0.1
        for name, p in tree_flatten(model.trainable_parameters())
    }
    out.mkdir()
    mx.save_safetensors(str(out / "adapters.safetensors"), adapter)
    config = {"fine_tune_type": "lora", "num_layers": 2, "lora_parameters": lora}
    (out / "adapter_config.json").write_text(json.dumps(config))
    return adapter
