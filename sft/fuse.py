"""Fuse a LoRA adapter into its base model, and prove the fused copy still answers the same.

Seed 001 shipped a fused model that played far worse than its adapter. So the fused
folder is built next to its final place, loaded back from disk as a user would load
it, and its greedy answers to sample prompts compared token for token with the
adapter model's; only if every answer matches is it moved into place. The fusing
itself is mlx-lm's (`LoRALinear.fuse`, then `mlx_lm.utils.save`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import mlx.core as mx
import mlx.nn as nn

from common.errors import UserError
from common.fileio import atomic_replace_dir
from llm.generation import SamplingSettings, sample
from llm.loading import load_model, resolve_model

QUANTIZATION_KEYS = ("quantization", "quantization_config")
# What write_fused does, in order; its `on_stage` hears each name as it begins (a progress display).
FUSE_STAGES = ("load", "save", "check")


@dataclass(frozen=True)
class FuseCheck:
    prompts: int
    tokens_compared: int
    max_logit_difference: float  # at the last prompt position, over all prompts


def check_same_greedy(reference: nn.Module, candidate: nn.Module, tokenizer, prompts: list[list[int]],
                      max_tokens: int = 48) -> FuseCheck:
    """Greedy answers of `candidate` must equal `reference`'s on every prompt; raises UserError if not."""
    settings = SamplingSettings(temperature=0.0, max_tokens=max_tokens)
    expected = sample(reference, tokenizer, prompts, 1, settings, batch_size=len(prompts))
    got = sample(candidate, tokenizer, prompts, 1, settings, batch_size=len(prompts))
    for i, ((want,), (have,)) in enumerate(zip(expected, got)):
        if want.tokens != have.tokens:
            raise UserError(f"the fused model answers sample prompt {i} differently from the adapter model "
                            f"({have.text[:60]!r} instead of {want.text[:60]!r}); not writing it")
    difference = max(float(mx.abs(reference(mx.array([p]))[0, -1] - candidate(mx.array([p]))[0, -1]).max())
                     for p in prompts)
    return FuseCheck(len(prompts), sum(len(c.tokens) for (c,) in expected), difference)


def write_fused(model_spec: str, adapter: str | Path, out_dir: str | Path, prompts: list[list[int]],
                max_tokens: int = 48, dtype: str = "auto",
                beside: Callable[[Path, FuseCheck], None] | None = None,
                on_stage: Callable[[str], None] = lambda stage: None) -> FuseCheck:
    """Write base + adapter as one mlx-lm model folder at `out_dir`, only once it checks out.

    The adapter is fused as `eval` fuses it (`load_model(..., fuse=True)`: in float32, before the cast
    to `dtype`), so the folder holds the very weights eval plays. `beside(folder, check)` may add files
    (a prompt format, a record) to the folder before it appears: all of it appears at once or none."""
    from mlx_lm.utils import load_config, save

    if not prompts:
        raise UserError("fusing needs at least one sample prompt to check the fused model against")
    on_stage("load")
    reference, tokenizer = load_model(model_spec, adapter, dtype)
    fused, _ = load_model(model_spec, adapter, dtype, fuse=True)
    source = resolve_model(model_spec)
    config = load_config(source)
    if not any(isinstance(m, nn.QuantizedLinear) for _, m in fused.named_modules()):
        for key in QUANTIZATION_KEYS:  # load_model dequantized it: say so in the config
            config.pop(key, None)
    result: list[FuseCheck] = []

    def build(folder: Path) -> None:
        on_stage("save")
        save(folder, source, fused, tokenizer, config, donate_model=True)
        on_stage("check")
        reloaded, _ = load_model(str(folder), dtype=dtype)
        result.append(check_same_greedy(reference, reloaded, tokenizer, prompts, max_tokens))
        if beside is not None:
            beside(folder, result[0])

    atomic_replace_dir(out_dir, build)
    return result[0]
