"""The adapter folder, exactly as mlx-lm writes and reads it.

Two files: `adapter_config.json` (fine_tune_type, num_layers and lora_parameters) and
`adapters.safetensors` (the trained weights by parameter name). SFT and RL write it
here; it loads with `llm.loading.load_model(spec, adapter=...)`, `mlx_lm.load(...,
adapter_path=...)` and `mlx_lm.generate --adapter-path`.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx

from common.errors import UserError, note
from common.fileio import atomic_replace_dir, read_json

ADAPTER_CONFIG = "adapter_config.json"
STACKED_ON = "stacked_on"  # config key: the adapter folder (relative) this one was trained over
ADAPTER_WEIGHTS = "adapters.safetensors"
# LoRA's A and B, DoRA's magnitude: the leaves mlx-lm's load_adapters accepts from a LoRA/DoRA file.
ADAPTER_LEAVES = ("lora_a", "lora_b", "m")


def read_adapter_config(adapter: str | Path) -> dict:
    path = Path(adapter) / ADAPTER_CONFIG
    config = read_json(path, "adapter config")
    if not isinstance(config.get("num_layers"), int):
        raise UserError(f"{path} is not an mlx-lm adapter config (no num_layers)")
    return config


def write_adapter(folder: Path, weights: dict[str, mx.array], config: dict) -> None:
    """Write the adapter files into `folder` (callers make the folder appear atomically)."""
    mx.save_safetensors(str(folder / ADAPTER_WEIGHTS), weights)
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=4) + "\n")


def save_adapter(folder: str | Path, weights: dict[str, mx.array], config: dict) -> Path:
    """Replace `folder` with the adapter in one step. What else the old folder held (a naming head
    fitted on the old adapter, its cached states) was made for the old weights and goes with them;
    a note names it, so that a head does not vanish unsaid."""
    folder = Path(folder)
    dropped = sorted(p.name for p in folder.iterdir() if p.name not in (ADAPTER_CONFIG, ADAPTER_WEIGHTS)) \
        if folder.is_dir() else []
    atomic_replace_dir(folder, lambda build: write_adapter(build, weights, config))
    if dropped:
        note(f"{folder} now holds the new adapter; removed with the old one, which they were made for: "
             f"{', '.join(dropped)}")
    return folder
