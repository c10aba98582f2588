"""One way to turn a `--model` / `--adapter` pair into a ready (model, tokenizer).

`--model` is `default` (the embedded SmolLM2), a local mlx-lm folder, or a Hugging
Face id. Every way this can fail because of what the user typed or has on disk
becomes a one-line `UserError`.

`--dtype auto` picks the weights' dtype by device. On a CPU, float32: there bf16/fp16
and quantized matmuls run on scalar code, about 50x slower than an fp32 matmul through
a real BLAS. On a GPU (CUDA or Metal), bfloat16: half the memory traffic of float32 for
a launch- and bandwidth-bound 135M model, and tensor cores without TF32's silent
rounding. Adapter weights (LoRA A and B) always stay float32, whatever the base: they
are what training updates and saves, and small updates vanish in bf16's 8-bit mantissa.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.tokenizer_utils import TokenizerWrapper

from common.errors import UserError
from common.fileio import read_json
from common.knobs import declare
from llm.adapter_files import ADAPTER_CONFIG, ADAPTER_LEAVES, ADAPTER_WEIGHTS, STACKED_ON
from llm.tokenizing import check_tokenizer

# What loading a folder or an adapter raises for broken files (bad JSON, truncated
# safetensors, unknown model_type, shape mismatches, missing config keys).
_LOAD_ERRORS = (OSError, ValueError, RuntimeError, KeyError, TypeError, AttributeError)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")  # fast, SentencePiece, byte-level BPE
DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}
DTYPE_CHOICES = ("auto", *DTYPES)
# Every command's --dtype, and every settings' dtype (common/knobs.py knob_like).
DTYPE = declare("dtype", str, "auto", "Weights' dtype: auto is float32 on a CPU and bfloat16 on a GPU (adapters, "
                                      "loss and log-probs stay float32).", choices=DTYPE_CHOICES, flag="--dtype")


def resolve_dtype(name: str = "auto", device: mx.Device | None = None) -> mx.Dtype:
    """The weights' dtype for `--dtype name` on `device` (the default device when None)."""
    if name == "auto":
        on_gpu = (device or mx.default_device()).type == mx.gpu
        return mx.bfloat16 if on_gpu else mx.float32
    if name not in DTYPES:
        raise UserError(f"--dtype must be one of {', '.join(DTYPE_CHOICES)}, got {name!r}")
    return DTYPES[name]


def load_model(
    spec: str, adapter: str | Path | None = None, dtype: str = "auto", fuse: bool = False
) -> tuple[nn.Module, TokenizerWrapper]:
    """Load `spec` (and the LoRA/DoRA/full adapter folder `adapter`, as mlx-lm writes it), its
    floating weights in `dtype` (`resolve_dtype`; quantized layers dequantized), adapters float32.

    `fuse`, for a model that only plays (eval, head states, head RL): the adapter's low-rank
    products are folded into the weights it adapts (in float32, before any cast), so a pass runs
    one matmul a projection instead of three and the adds between them (a CPU decode step 10%,
    a prefill 12% faster, results/passes/). The model then holds no adapter layers to train."""
    from mlx_lm.utils import dequantize_model, load

    path = resolve_model(spec)
    config = read_json(path / "config.json", "model config")  # mlx-lm's own errors are Python's words
    check_folder(config, path)
    try:
        model, tokenizer = load(str(path))
    except _LOAD_ERRORS as err:
        raise UserError(f"cannot load the model in {path}: {_one_line(err)}") from err
    check_tokenizer(tokenizer, path)

    weights = resolve_dtype(dtype)
    model = dequantize_model(model)
    if adapter is not None:
        apply_adapter(model, Path(adapter))
        if fuse:
            fuse_adapter_layers(model)
    cast_floats(model, weights)
    return model, tokenizer


def check_folder(config, path: Path) -> None:
    """A one-line error naming `path` when its config.json names no architecture mlx-lm has code for
    (mlx-lm says only "Model type X not supported."), or it holds no tokenizer (transformers then
    builds one from the model type, with no chat template or none of the model's tokens)."""
    from mlx_lm.utils import MODEL_REMAPPING

    kind = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(kind, str) or not kind:
        raise UserError(f"{path / 'config.json'} names no model_type: it is not an mlx-lm or Hugging Face model config")
    if importlib.util.find_spec(f"mlx_lm.models.{MODEL_REMAPPING.get(kind, kind)}") is None:
        raise UserError(f"{path / 'config.json'} names model_type {kind!r}, an architecture this mlx-lm has no code "
                        "for (llama, mistral, qwen2, qwen3, gemma3_text, phi3 and others are tested here; a newer "
                        "mlx-lm may know it)")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(f"{path} holds no tokenizer ({', '.join(TOKENIZER_FILES)}): copy the model's tokenizer files "
                        "beside its config.json")


def portable_spec(spec: str) -> str:
    """`spec` as any working directory loads it: a local folder by its absolute path, other specs as they are."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if spec != "default" and path.is_dir() else spec


def resolve_model(spec: str) -> Path:
    """The local folder for `spec`: the default model, a folder, or a Hugging Face snapshot."""
    if spec == "default":
        from llm.default_model import default_model_path

        return default_model_path()
    path = Path(spec).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"--model {spec}: expected a model folder, got a file")
    path = path if path.is_dir() else _hub_snapshot(spec)
    if not (path / "config.json").is_file():
        raise UserError(f"{path} is not a model folder: it has no config.json")
    return path


def _hub_snapshot(repo_id: str) -> Path:
    """Download (or find in the local Hugging Face cache) the files mlx-lm needs."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )
    from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

    try:
        return Path(snapshot_download(repo_id, allow_patterns=DEFAULT_ALLOW_PATTERNS))
    except HFValidationError as err:
        raise UserError(f"model folder not found: {repo_id}") from err
    except RepositoryNotFoundError as err:
        raise UserError(
            f"no model {repo_id!r} on Hugging Face (or it needs a login), and no such local folder"
        ) from err
    except (LocalEntryNotFoundError, HfHubHTTPError) as err:
        raise UserError(
            f"model {repo_id!r} is not a local folder, not in the Hugging Face cache, and the hub "
            "can't be reached (offline?); try --model default"
        ) from err


def apply_adapter(model: nn.Module, adapter: Path) -> None:
    """Attach an adapter folder as mlx-lm's trainer writes it.

    That is adapter_config.json + adapters.safetensors (llm/adapter_files.py), for LoRA, DoRA or
    full fine-tunes. A config naming `stacked_on` (a folder relative to this one) is an adapter
    trained over another: an RL checkpoint holds only RL's own LoRA over the run's start adapter,
    and loaded alone it played as the bare base model (results/endgame-rl-long). The one below
    is applied and fused first, as RL itself fused it.
    """
    from mlx_lm.tuner.utils import load_adapters

    if not adapter.is_dir():
        raise UserError(f"adapter folder not found: {adapter}")
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not (adapter / name).is_file():
            raise UserError(f"{adapter} is not an adapter folder: it has no {name}")
    config = read_json(adapter / ADAPTER_CONFIG, "adapter config")  # mlx-lm's own errors are Python's words
    below = config.get(STACKED_ON) if isinstance(config, dict) else None
    if below is not None:
        apply_adapter(model, adapter / below)
        fuse_adapter_layers(model)
    try:
        weights = mx.load(str(adapter / ADAPTER_WEIGHTS))
        refuse_nonfinite(weights, adapter / ADAPTER_WEIGHTS)
        load_adapters(model, str(adapter))
    except _LOAD_ERRORS as err:
        raise UserError(f"cannot apply the adapter in {adapter}: {_one_line(err)}") from err
    refuse_incomplete(model, config, set(weights), adapter / ADAPTER_WEIGHTS)
    model.eval()


def refuse_incomplete(model: nn.Module, config: dict, held: set[str], path: Path) -> None:
    """A one-line error naming `path` when the adapter lacks a tensor its config asks of `model`
    (whose adapter layers are attached): mlx-lm loads what there is, and a layer left out plays
    as the bare model's, silently."""
    wanted = adapter_tensors(model, config)
    missing = sorted(wanted - held)
    if missing:
        raise UserError(f"{path} holds {len(wanted) - len(missing)} of the {len(wanted)} tensors its adapter config "
                        f"asks for (no {missing[0]}): the file is cut short or damaged; use a whole adapter")


def adapter_tensors(model: nn.Module, config: dict) -> set[str]:
    """The tensors an adapter of `config` holds for `model`: every LoRA or DoRA leaf of its adapter
    layers, or for a full fine-tune every weight of the last `num_layers` layers it trains."""
    params = dict(tree_flatten(model.parameters()))
    if config.get("fine_tune_type", "lora") != "full":
        return {name for name in params if name.rsplit(".", 1)[-1] in ADAPTER_LEAVES}
    trained = {id(layer) for layer in model.layers[-max(config.get("num_layers", 0), 0):]}
    prefixes = tuple(f"{name}." for name, module in model.named_modules() if id(module) in trained)
    return {name for name in params if name.startswith(prefixes)}


def fuse_adapter_layers(model: nn.Module) -> None:
    """Replace every adapter layer (anything with mlx-lm's `fuse()`) by its fused linear."""
    from mlx.utils import tree_unflatten

    fused = [(name, module.fuse()) for name, module in model.named_modules() if hasattr(module, "fuse")]
    if fused:
        model.update_modules(tree_unflatten(fused))


def refuse_nonfinite(arrays: dict[str, mx.array], path: Path) -> None:
    """A one-line error naming `path` when any of its float arrays holds NaN or inf: weights or
    optimizer state from a damaged file or a diverged run would train or play on as NaN silently."""
    for value in arrays.values():
        if mx.issubdtype(value.dtype, mx.floating) and not mx.all(mx.isfinite(value)).item():
            raise UserError(f"{path} holds NaN or infinite values: the file is damaged or its run diverged "
                            "before it was saved")


def cast_floats(model: nn.Module, dtype: mx.Dtype) -> None:
    """Cast every floating-point parameter to `dtype`, except adapter weights, which stay float32
    (integer/packed ones stay as they are)."""
    def cast(name: str, p: mx.array) -> mx.array:
        if not mx.issubdtype(p.dtype, mx.floating):
            return p
        return p.astype(mx.float32 if name.rsplit(".", 1)[-1] in ADAPTER_LEAVES else dtype)

    model.update(tree_unflatten([(name, cast(name, p)) for name, p in tree_flatten(model.parameters())]))
    mx.eval(model.parameters())


def _one_line(err: BaseException, limit: int = 300) -> str:
    """The error's message on one line, cut short: the CLI prints it after `error:`."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
