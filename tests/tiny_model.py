"""A tiny random llama model folder for tests.

Tests of SFT, RL and evaluation need a model that mlx-lm loads like any other
(config.json, model.safetensors, tokenizer.json, a chat template) but that builds in
about a second, offline, and the same way every time. Its tokenizer is a byte-level
BPE trained in-process on a small Wordle-flavoured corpus, with SmolLM2's special
tokens at SmolLM2's ids, so prompts look the way they do with the default model.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models import llama
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from common.fileio import atomic_replace_dir

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 as in SmolLM2
# SmolLM2-135M-Instruct's own ChatML template (from its GGUF's tokenizer.chat_template).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
VOCAB_SIZE = 400
_WORDS = (
    "crane slate salet trace crate raise arise adieu stare roate least train about other "
    "which their there first would these click price stamp flint ghost jumpy vowel wordle"
).split()
_LINES = [
    "You are playing Wordle. Guess the secret five-letter word in six tries.",
    "Feedback: G means green (right letter, right spot), Y yellow, X gray.",
    "Turn 1 of 6. Turn 2 of 6. Turn 3 of 6. 0 1 2 3 4 5 6 7 8 9",
    "<think>The letters a, e and r are in the word.</think>",
    "What is the capital of France? The capital of France is Paris.",
]


def corpus() -> list[str]:
    """The built-in training text: game prose plus think/guess markup around every word."""
    turns = [f"<think>try {w}</think>\n<guess>{w}</guess>\n{w.upper()} -> GYXXG" for w in _WORDS]
    return _LINES + turns


def build_tokenizer(vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """A GPT-2 style byte-level BPE with SmolLM2's pre-tokenization (single digits)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return tokenizer


def tiny_config(vocab_size: int) -> dict:
    """2 layers, hidden 64, 4 heads with 2 kv heads: grouped-query attention like SmolLM2."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab_size,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
    }


def build_tiny_model(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the tiny model folder to `out_dir`; the same seed gives the same bytes."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = tiny_config(tokenizer.get_vocab_size())

    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights, metadata={"format": "mlx"})

    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tokenizer.save(str(out_dir / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    return out_dir


def cached_tiny_model(root: str | Path, seed: int = 0) -> Path:
    """`root/tiny-llama-seed<seed>`, built on first call: tests share one copy per session."""
    path = Path(root) / f"tiny-llama-seed{seed}"
    if not (path / "config.json").is_file():
        atomic_replace_dir(path, lambda build: build_tiny_model(build, seed))
    return path
