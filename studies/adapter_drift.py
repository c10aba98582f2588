"""How far training moved a LoRA adapter's weight updates, against the start's own.

Every run continued from ../shared/adapters/gpu-sft-2400 (continued SFT, expert iteration,
GRPO) lowered that model's closing rate on the very training secrets it had memorised, even
SFT on the teacher's answers at such positions. A learning rate of the size that trains a
fresh adapter moves every weight of a converged one by about the rate at each Adam step,
whatever its gradient: this says how much training added to the start's weight updates
(scale * A @ B per layer), as a share of their size. Run from the repository root:

    python -m studies.adapter_drift START ADAPTER [ADAPTER...] [--json OUT.json]

START and each ADAPTER are adapter or checkpoint folders (adapters.safetensors inside).
"""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from common.errors import UserError, run_script
from common.fileio import atomic_write_json


def effective_updates(folder: str) -> tuple[dict[str, np.ndarray], bool]:
    """Each adapted layer's weight update, scale * A @ B, and whether the adapter is stacked on
    another (an RL checkpoint: a fresh LoRA over the fused start, rl/policy.py)."""
    import mlx.core as mx

    from llm.adapter_files import ADAPTER_WEIGHTS, STACKED_ON, read_adapter_config

    path = Path(folder) / ADAPTER_WEIGHTS
    if not path.is_file():
        raise UserError(f"{folder} has no {ADAPTER_WEIGHTS}")
    config = read_adapter_config(folder)
    if config.get("fine_tune_type", "lora") != "lora":
        raise UserError(f"{folder} is not a LoRA adapter")
    scale = float(config["lora_parameters"]["scale"])
    weights = {name: np.array(value.astype(mx.float32)) for name, value in mx.load(str(path)).items()}
    layers = sorted(name[:-len(".lora_a")] for name in weights if name.endswith(".lora_a"))
    return ({layer: scale * weights[f"{layer}.lora_a"] @ weights[f"{layer}.lora_b"] for layer in layers},
            STACKED_ON in config)


def drift(start: dict[str, np.ndarray], other: dict[str, np.ndarray], stacked: bool) -> dict[str, float | bool]:
    """The size of what training added to the start's weight updates, as a share of their own
    size (Frobenius norms over every adapted layer): a stacked adapter adds its own updates,
    a continued one the difference from the start's."""
    if set(other) - set(start):
        raise UserError("the adapter adapts layers the start does not")
    added = {layer: update if stacked else update - start[layer] for layer, update in other.items()}
    size = float(np.sqrt(sum(np.sum(u ** 2) for u in start.values())))
    moved = float(np.sqrt(sum(np.sum(u ** 2) for u in added.values())))
    return {"start_norm": round(size, 4), "change_norm": round(moved, 4), "relative_change": round(moved / size, 4),
            "stacked": stacked}


@click.command()
@click.argument("start", type=click.Path(exists=True, file_okay=False))
@click.argument("adapters", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the figures here.")
def main(start: str, adapters: tuple[str, ...], json_out: str | None) -> None:
    base, _ = effective_updates(start)
    table = {}
    for folder in adapters:
        table[folder] = drift(base, *effective_updates(folder))
        print(f"{folder}: the weight updates moved by {100 * table[folder]['relative_change']:.1f}% of the start's "
              f"({'a stacked adapter' if table[folder]['stacked'] else 'the same adapter, continued'})")
    if json_out:
        atomic_write_json(json_out, {"start": start, "adapters": table})


if __name__ == "__main__":
    run_script(main)
