"""Which weights train: the adapter a run attaches, continues and saves.

A LoRA run wraps every linear projection of every layer (q, k, v, o, gate, up,
down) with mlx-lm's `LoRALinear`; a full run (`--full`) unfreezes the transformer
layers, as `mlx_lm.lora --fine-tune-type full` does. Either way the trained weights
are the model's trainable parameters, saved as an mlx-lm adapter folder
(llm/adapter_files.py, beside the loader that reads it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.tuner.utils import linear_to_lora_layers

from common.knobs import knob
from llm.adapter_files import ADAPTER_LEAVES, read_adapter_config


@dataclass(frozen=True)
class AdapterSettings:
    """What to train. `scale` multiplies the low-rank update (mlx-lm's default, 20)."""

    full: bool = knob(False, "Train all transformer weights instead of a LoRA adapter.")
    rank: int = knob(8, "LoRA rank (all projections, all layers).", range=(1, 1024))
    scale: float = knob(20.0, "Multiplier of the low-rank update.", range=(0.0, 1000.0), open_low=True)
    dropout: float = knob(0.0, "Dropout on the adapter's input.", range=(0.0, 1.0))


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


def trainable_weights(model: nn.Module) -> dict[str, mx.array]:
    """The model's trainable parameters by name: what its adapter file holds."""
    return dict(tree_flatten(model.trainable_parameters()))
