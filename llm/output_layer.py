"""A model's output layer: the map from its final hidden states to next-token logits, found once.

SFT runs it on the answer positions only (sft/trainer.py) and the naming head scores words
through its rows (llm/word_steering.py). mlx-lm's models keep it in one of two places: a
`lm_head` (Mistral, Phi-3, Qwen and Llama models that do not tie it) or the input embeddings
read backwards (`model.model.embed_tokens.as_linear`: SmolLM2, Qwen2.5 and Qwen3's small
models, Gemma 3, which ties it by shipping no `lm_head`). Whether it is tied is said in
different places (`args.tie_word_embeddings` in most, an attribute of the model in Gemma 3's),
so it is found by what the model holds, and `output_split` checks that the transformer then the
layer give the model's own logits: a model that scales or caps its logits after the layer
(Gemma 2's soft cap, Cohere's logit scale) is run whole by SFT and refused by the naming head.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn

from common.errors import UserError
from llm.tolerance import logit_tolerance, weight_dtype


def _layer(model: nn.Module) -> tuple[nn.Module, bool] | None:
    """The module whose weight rows are the output embeddings, and whether it is the tied embeddings."""
    if "lm_head" in model:
        return model.lm_head, False
    body = getattr(model, "model", None)
    embed = getattr(body, "embed_tokens", None) if isinstance(body, nn.Module) else None
    return (embed, True) if embed is not None and hasattr(embed, "as_linear") else None


def _found(model: nn.Module) -> tuple[nn.Module, bool]:
    found = _layer(model)
    if found is None:
        raise UserError(f"this {type(model).__module__} model keeps its output layer where mlx-lm's models do "
                        "not (no lm_head, no model.embed_tokens)")
    return found


def output_layer(model: nn.Module) -> Callable[[mx.array], mx.array]:
    """Final hidden states to next-token logits, as the model makes them (a head or tied embeddings)."""
    layer, tied = _found(model)
    return layer.as_linear if tied else layer


def output_weight(model: nn.Module) -> mx.array:
    """(vocabulary, hidden) the output embeddings, as floats (a quantized layer's dequantized)."""
    layer, _ = _found(model)
    if "scales" in layer:
        return mx.dequantize(layer.weight, layer.scales, layer.get("biases"), layer.group_size, layer.bits,
                             mode=layer.mode)
    return layer.weight


def output_split(model: nn.Module) -> tuple[Callable, Callable] | None:
    """(transformer, output layer) of an mlx-lm model, if calling them in turn equals `model`."""
    body = getattr(model, "model", None)
    if not isinstance(body, nn.Module) or _layer(model) is None:
        return None
    head = output_layer(model)
    probe, training = mx.array([[1, 2, 3, 4]]), model.training
    rtol, atol = logit_tolerance(weight_dtype(model))  # a GPU's TF32 or half precision is no mismatch
    model.eval()  # no dropout while comparing
    try:
        same = mx.allclose(head(body(probe)), model(probe), rtol=rtol, atol=atol).item()
    except (TypeError, ValueError):
        same = False
    model.train(training)
    return (body, head) if same else None
