"""Which weights train, and the adapter folder that holds them, exactly as mlx-lm writes it.

A LoRA run wraps every linear projection of every layer (q, k, v, o, gate, up,
down) with mlx-lm's `LoRALinear`; a full run (`--full`) unfreezes the transformer
layers, as `mlx_lm.lora --fine-tune-type full` does. Either way the trained weights
are the model's trainable parameters, and the folder (`adapter_config.json` with
fine_tune_type, num_layers and lora_parameters, plus `adapters.safetensors`) loads
with `mlx_lm.load(..., adapter_path=...)`, `mlx_lm.generate --adapter-path` and
`llm.loading.load_model(spec, adapter=...)`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.tuner.utils import linear_to_lora_layers

from solver.errors import UserError
from solver.fileio import atomic_replace_dir, read_json

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapters.safetensors"
ADAPTER_LEAVES = ("lora_a", "lora_b", "m")  # what mlx-lm's load_adapters accepts from a LoRA/DoRA file


@dataclass(frozen=True)
class AdapterSettings:
    """What to train. `scale` multiplies the low-rank update (mlx-lm's default, 20)."""

    full: bool = False
    rank: int = 8
    scale: float = 20.0
    dropout: float = 0.0


def attach_adapter(model: nn.Module, settings: AdapterSettings) -> dict:
    """Freeze the base model and add what trains; returns the adapter config to save with it.

    LoRA's `lora_a` starts random: seed `mx.random` first for a reproducible run.
    """
    model.freeze()
    num_layers = len(model.layers)
    if settings.full:
        for layer in model.layers:
            layer.unfreeze()
        return {"fine_tune_type": "full", "num_layers": num_layers, "lora_parameters": None}
    lora_parameters = {"rank": settings.rank, "scale": settings.scale, "dropout": settings.dropout}
    linear_to_lora_layers(model, num_layers, lora_parameters)
    return {"fine_tune_type": "lora", "num_layers": num_layers, "lora_parameters": lora_parameters}


def continue_adapter(model: nn.Module, adapter: str | Path) -> dict:
    """Make an adapter already applied by `load_model(spec, adapter)` trainable again.

    Training goes on with the adapter's own settings (rank, scale, full or LoRA), so
    the result is still one adapter of the same shape.
    """
    config = read_adapter_config(adapter)
    model.freeze()
    if config.get("fine_tune_type", "lora") == "full":
        for layer in model.layers[-max(config["num_layers"], 0):]:
            layer.unfreeze()
    else:
        model.unfreeze(keys=list(ADAPTER_LEAVES), strict=False)
    return config


def read_adapter_config(adapter: str | Path) -> dict:
    path = Path(adapter) / ADAPTER_CONFIG
    config = read_json(path, "adapter config")
    if not isinstance(config.get("num_layers"), int):
        raise UserError(f"{path} is not an mlx-lm adapter config (no num_layers)")
    return config


def trainable_weights(model: nn.Module) -> dict[str, mx.array]:
    return dict(tree_flatten(model.trainable_parameters()))


def write_adapter(folder: Path, model: nn.Module, config: dict) -> None:
    """Write the adapter files into `folder` (callers make the folder appear atomically)."""
    mx.save_safetensors(str(folder / ADAPTER_WEIGHTS), trainable_weights(model))
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=4) + "\n")


def save_adapter(folder: str | Path, model: nn.Module, config: dict) -> Path:
    """Replace `folder` with the model's adapter in one step."""
    atomic_replace_dir(folder, lambda build: write_adapter(build, model, config))
    return Path(folder)
