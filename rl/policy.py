"""The policy RL trains, its reference, and the adapter it leaves behind.

RL starts from an SFT adapter, and its KL term must hold the policy near that SFT
model, not near the base model (which cannot even answer in format). So the start
adapter is fused into the base weights (sft/fuse.py), a fresh LoRA adapter is put on
top and trained, and the reference policy is the model with that adapter switched
off: the SFT model, with no second copy of any weights.

What a user loads afterwards is one ordinary mlx-lm LoRA adapter over the base model:
two LoRA updates on the same layer add up exactly to one of rank r1 + r2 (stack the
A matrices, stack the B matrices with the scales folded in), so the exported adapter
is the start adapter and the RL adapter side by side.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.tuner.lora import LoRALinear

from common.errors import UserError
from llm.adapter_files import STACKED_ON, read_adapter_config, save_adapter
from llm.loading import fuse_adapter_layers
from sft.lora import AdapterSettings, attach_adapter

LoraPair = tuple[mx.array, mx.array, float]  # lora_a (in, r), lora_b (r, out), scale


@dataclass
class RLPolicy:
    """The model RL trains: the start adapter fused into the base weights and a fresh LoRA adapter on
    top (switched off, the KL reference). Not a `solver.policy.Policy`, the state -> guess interface."""

    model: nn.Module
    tokenizer: object
    adapter_config: dict  # of the RL adapter alone (what checkpoints hold)
    start: dict[str, LoraPair]  # the fused start adapter, by module name (empty without one)

    def export(self, folder: str | Path) -> Path:
        """Write start + RL adapter as one mlx-lm LoRA adapter over the base model (atomically)."""
        weights, config = merged_adapter(self.model, self.start, self.adapter_config)
        return save_adapter(folder, weights, config)


def load_policy(model_spec: str, start_adapter: str | Path | None, lora: AdapterSettings,
                dtype: str = "auto") -> RLPolicy:
    """The model with `start_adapter` fused in and a fresh float32 RL LoRA adapter on weights of
    `dtype` (llm/loading.py; seed mx.random first)."""
    from llm.loading import load_model

    start: dict[str, LoraPair] = {}
    start_config = read_adapter_config(start_adapter) if start_adapter is not None else {}
    if STACKED_ON in start_config:
        raise UserError(f"--adapter {start_adapter} is an RL checkpoint's own LoRA over another adapter; "
                        "start from its run's best/ or adapter/ folder, which hold both")
    model, tokenizer = load_model(model_spec, start_adapter, dtype)
    if start_adapter is not None:
        kind = start_config.get("fine_tune_type", "lora")
        odd = [name for name, m in model.named_modules() if hasattr(m, "fuse") and not isinstance(m, LoRALinear)]
        if kind != "lora" or odd:
            raise UserError(f"--adapter {start_adapter} is a {kind} adapter{' on ' + odd[0] if odd else ''}; "
                            "RL continues LoRA adapters on linear layers")
        start = {name: (m.lora_a, m.lora_b, m.scale) for name, m in model.named_modules() if isinstance(m, LoRALinear)}
        fuse_adapter_layers(model)
    config = attach_adapter(model, lora)
    config["model"] = model_spec
    return RLPolicy(model, tokenizer, config, start)


def merged_adapter(model: nn.Module, start: dict[str, LoraPair], rl_config: dict) -> tuple[dict, dict]:
    """Weights and config of the single adapter equal to `start` followed by the model's RL adapter."""
    rl = {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}
    missing = sorted(set(start) - set(rl))
    if missing:
        raise UserError(f"the start adapter trains {missing[0]}, which the RL adapter does not cover")
    start_rank = max((a.shape[1] for a, _, _ in start.values()), default=0)
    weights = {}
    for name, layer in rl.items():
        a, b = layer.lora_a, layer.lora_b
        if start_rank:
            if name in start:
                a0, b0, scale0 = start[name]
                b0 = b0 * (scale0 / layer.scale)
            else:
                a0, b0 = mx.zeros((a.shape[0], start_rank), a.dtype), mx.zeros((start_rank, b.shape[1]), b.dtype)
            a, b = mx.concatenate([a0, a], axis=1), mx.concatenate([b0, b], axis=0)
        weights[f"{name}.lora_a"], weights[f"{name}.lora_b"] = a, b
    lora_parameters = {**rl_config["lora_parameters"], "rank": rl_config["lora_parameters"]["rank"] + start_rank}
    return weights, {**rl_config, "lora_parameters": lora_parameters}
