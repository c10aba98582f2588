"""Tiny random model folders for tests: llama by default, and the other families people bring.

Tests of SFT, RL and evaluation need a model that mlx-lm loads like any other
(config.json, model.safetensors, tokenizer.json, a chat template) but that builds in
about a second, offline, and the same way every time. Its tokenizer is a byte-level
BPE trained in-process on a small Wordle-flavoured corpus, with SmolLM2's special
tokens at SmolLM2's ids, so prompts look the way they do with the default model.

`build_tiny_model(..., architecture=, tokenizer=, bits=)` builds the other families at the
same tiny size, each with its own quirks kept (`ARCHITECTURES`): Qwen2's biased projections,
Qwen3's normed queries and keys and head width apart from the hidden size, Gemma 3's scaled
embeddings, sliding windows shorter than a prompt and tied output embeddings it ties by their
absence, Phi-3's fused projections and untied head, Mistral's untied head on llama's code. The
`sentencepiece` tokenizer marks a word's start with `▁` (Metaspace, SentencePiece's byte-fallback
decoder, as Llama 2, Mistral and Phi-3 ship); `chars` is one with no merges at all, so no token
holds a word's start and a letter. `bits` quantizes the weights as `mlx_lm convert -q` does.
The defaults build exactly the folder they always did: other tests depend on its bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import importlib
from collections.abc import Callable

import mlx.core as mx
from mlx.utils import tree_flatten
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

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


def build_tokenizer(vocab_size: int = VOCAB_SIZE, named: bool = False) -> Tokenizer:
    """A GPT-2 style byte-level BPE with SmolLM2's pre-tokenization (single digits). `named` also
    trains on a line naming each word, so that common words get a whole ` word` token as
    SmolLM2's vocabulary has for most answers (what a spelled output layer's word rows are)."""
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
    tokenizer.train_from_iterator(corpus() + ([f"Only {w} remains." for w in _WORDS] if named else []), trainer=trainer)
    return tokenizer


def build_sentencepiece_tokenizer(vocab_size: int = VOCAB_SIZE, legacy: bool = False) -> Tokenizer:
    """A SentencePiece-style BPE as tokenizer.json holds one: a word's start marked `▁`, and
    SentencePiece's decoder (`▁` back to a space, byte fallback, the first space stripped), which
    mlx-lm detokenizes with its SPM detokenizer. The marks come from a Metaspace pre-tokenizer
    that prefixes the text's start only (Mistral's and Llama's newer files), or with `legacy` from
    a normalizer that puts `▁` before every text and turns spaces into `▁` (Llama 2's and Phi-3's:
    ` Only` alone is then `▁▁Only`, after a sentence `▁Only`). Trained on the corpus plus a line
    naming each word, so that common words get a `▁word` token and the rest open with a shorter
    `▁` piece."""
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[0]))
    metaspace = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), metaspace])
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    alphabet = [chr(c) for c in range(32, 127)] + ["\n", "\u2581"]  # no text the game writes is unknown
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=alphabet,
                                  show_progress=False)
    tokenizer.train_from_iterator(corpus() + [f"Only {w} remains." for w in _WORDS], trainer=trainer)
    if legacy:  # the merges never span a `▁` (trained split there), so the whole text can run through them
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tokenizer.pre_tokenizer = pre_tokenizers.Digits(individual_digits=True)
    return tokenizer


def build_chars_tokenizer() -> Tokenizer:
    """The SentencePiece-style tokenizer with no merges: every word is `▁` and then its letters, so
    no token opens a word with a letter (a model the naming head cannot serve)."""
    return build_sentencepiece_tokenizer(vocab_size=len(SPECIAL_TOKENS) + 97)


TOKENIZERS = {"bpe": build_tokenizer, "bpe-named": lambda: build_tokenizer(named=True), "sentencepiece": build_sentencepiece_tokenizer,
              "sentencepiece-legacy": lambda: build_sentencepiece_tokenizer(legacy=True), "chars": build_chars_tokenizer}


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


def _family(model_type: str, architecture: str, **changes) -> Callable[[int], dict]:
    """`tiny_config` as another family's config.json has it: its model_type, and `changes`."""
    def config(vocab_size: int) -> dict:
        return {**tiny_config(vocab_size), "architectures": [architecture], "model_type": model_type, **changes}
    return config


# Each family at the tiny size, with what sets it apart from llama in mlx-lm's code kept.
ARCHITECTURES = {
    "llama": tiny_config,
    "qwen2": _family("qwen2", "Qwen2ForCausalLM", rms_norm_eps=1e-6, rope_theta=1e6),  # biased q, k, v
    "qwen3": _family("qwen3", "Qwen3ForCausalLM", rms_norm_eps=1e-6, rope_theta=1e6,
                     head_dim=32),  # q/k norms; heads x head_dim = 128, twice the hidden size
    "gemma3_text": _family("gemma3_text", "Gemma3ForCausalLM", num_key_value_heads=1, head_dim=32,
                           query_pre_attn_scalar=32, rms_norm_eps=1e-6, rope_theta=1e6, rope_local_base_freq=1e4,
                           sliding_window=24, sliding_window_pattern=2),
    "phi3": _family("phi3", "Phi3ForCausalLM", tie_word_embeddings=False,  # fused qkv and gate_up projections
                    original_max_position_embeddings=2048),
    "mistral": _family("mistral", "MistralForCausalLM", tie_word_embeddings=False),  # llama's code, untied head
}


def build_tiny_model(out_dir: str | Path, seed: int = 0, architecture: str = "llama", tokenizer: str = "bpe",
                     bits: int | None = None) -> Path:
    """Write the tiny model folder to `out_dir`; the same arguments give the same bytes. `bits`:
    the weights quantized (group size 32) as mlx-lm's converter writes a quantized model."""
    from mlx_lm.utils import MODEL_REMAPPING, quantize_model

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = TOKENIZERS[tokenizer]()
    config = ARCHITECTURES[architecture](tokenizer.get_vocab_size())

    mx.random.seed(seed)
    family = importlib.import_module(f"mlx_lm.models.{MODEL_REMAPPING.get(config['model_type'], config['model_type'])}")
    model = family.Model(family.ModelArgs.from_dict(config))
    if architecture == "gemma3_text":  # Gemma ships no lm_head: mlx-lm ties the output to the embeddings then
        model.pop("lm_head")
    if bits is not None:
        model, config = quantize_model(model, config, group_size=32, bits=bits)
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


def cached_tiny_model(root: str | Path, seed: int = 0, architecture: str = "llama", tokenizer: str = "bpe",
                      bits: int | None = None) -> Path:
    """`root/tiny-llama-seed<seed>` (other families and tokenizers named after them), built on
    first call: tests share one copy per session."""
    kind = "llama" if (architecture, tokenizer, bits) == ("llama", "bpe", None) else \
        "-".join([architecture, tokenizer] + ([f"q{bits}"] if bits else []))
    path = Path(root) / f"tiny-{kind}-seed{seed}"
    if not (path / "config.json").is_file():
        atomic_replace_dir(path, lambda build: build_tiny_model(build, seed, architecture, tokenizer, bits))
    return path
