"""Training checkpoints that survive a kill -9 at any moment; SFT and RL both keep theirs here.

Layout under a run folder:

    RUN/checkpoints/step-0000100/   adapter_config.json + adapters.safetensors (an mlx-lm
                                    adapter folder in its own right), optimizer.safetensors
                                    (moments, step and learning rate: the LR schedule
                                    position), rng.safetensors (mlx's global key),
                                    state.json (step + the caller's `extra`)
    RUN/latest                      the name of the newest complete checkpoint

A checkpoint is built in a temp folder and renamed into place; only then is `latest`
replaced (also by rename). A kill at any point leaves `latest` naming a complete
checkpoint: the previous one or the new one. Older checkpoints are pruned after the
pointer moves, keeping the last `keep`.

`extra` is any JSON data the caller needs to continue exactly: SFT keeps its
configuration there, RL its own RNG states (e.g. `np.random.Generator.bit_generator.state`),
counters and metrics.

    save_checkpoint(run_dir, model, optimizer, step, adapter_config, extra={...})
    checkpoint = load_checkpoint(run_dir, model, optimizer)  # -> Checkpoint(path, step, extra)

`load_checkpoint` needs the model already shaped like the saved one (the same LoRA
layers attached) and restores, in place, its trainable weights, the optimizer state
and mlx's random key; anything missing, unreadable, of the wrong shape or not finite
(NaN or inf) is a one-line `UserError`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten

from common.errors import UserError
from common.fileio import atomic_replace_dir, atomic_write_text, parse_json, read_text
from llm.adapter_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS, write_adapter
from llm.loading import refuse_nonfinite
from sft.lora import trainable_weights

CHECKPOINTS = "checkpoints"
LATEST = "latest"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
STATE_FILE = "state.json"
FILES = (ADAPTER_CONFIG, ADAPTER_WEIGHTS, OPTIMIZER_FILE, RNG_FILE, STATE_FILE)


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    extra: dict


def checkpoint_name(step: int) -> str:
    return f"step-{step:07d}"


def save_checkpoint(run_dir: str | Path, model: nn.Module, optimizer: optim.Optimizer, step: int,
                    adapter_config: dict, extra: dict | None = None, keep: int = 2) -> Path:
    """Write the checkpoint for `step`, point `latest` at it, then drop all but the last `keep`."""
    root = Path(run_dir)
    name = checkpoint_name(step)

    def build(folder: Path) -> None:
        write_adapter(folder, trainable_weights(model), adapter_config)
        mx.save_safetensors(str(folder / OPTIMIZER_FILE), dict(tree_flatten(optimizer.state)))
        mx.save_safetensors(str(folder / RNG_FILE), {"key": mx.random.state[0]})
        (folder / STATE_FILE).write_text(json.dumps({"step": step, "extra": extra or {}}, indent=2) + "\n")

    atomic_replace_dir(root / CHECKPOINTS / name, build)
    atomic_write_text(root / LATEST, name + "\n")
    _prune(root / CHECKPOINTS, keep, name)
    return root / CHECKPOINTS / name


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The folder `latest` names, or None when the run has never saved one."""
    pointer = Path(run_dir) / LATEST
    if not pointer.is_file():
        return None
    return Path(run_dir) / CHECKPOINTS / read_text(pointer, "checkpoint pointer").strip()


def load_checkpoint(run_dir: str | Path, model: nn.Module, optimizer: optim.Optimizer) -> Checkpoint:
    """Restore the newest checkpoint of `run_dir` into `model` and `optimizer` (and mlx's RNG)."""
    path = latest_checkpoint(run_dir)
    if path is None:
        raise UserError(f"nothing to resume: {run_dir} has no checkpoint ({Path(run_dir) / LATEST} is missing)")
    missing = [f for f in FILES if not (path / f).is_file()]
    if missing:
        raise UserError(f"checkpoint {path} is incomplete or missing: no {missing[0]}")
    step, extra = _read_state(path)
    try:
        weights = mx.load(str(path / ADAPTER_WEIGHTS))
        optimizer_state = mx.load(str(path / OPTIMIZER_FILE))
        key = mx.load(str(path / RNG_FILE))["key"]
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as err:
        raise UserError(f"checkpoint {path} is corrupt: {' '.join(str(err).split())[:200]}") from err
    expected_key = mx.random.state[0]
    if key.shape != expected_key.shape or key.dtype != expected_key.dtype:
        raise UserError(f"checkpoint {path} is corrupt: its random key is {str(key.dtype).split('.')[-1]} "
                        f"{tuple(key.shape)}, expected {str(expected_key.dtype).split('.')[-1]} "
                        f"{tuple(expected_key.shape)}")

    refuse_nonfinite(weights, path / ADAPTER_WEIGHTS)
    refuse_nonfinite(optimizer_state, path / OPTIMIZER_FILE)
    _check_same_shapes(weights, trainable_weights(model), f"checkpoint {path} does not fit the model")
    model.load_weights(list(weights.items()), strict=False)
    _restore_optimizer(optimizer, model, optimizer_state, path)
    mx.random.state[0][...] = key  # mlx has no setter for its global key; assign into it
    mx.eval(model.parameters(), optimizer.state, mx.random.state)
    return Checkpoint(path, step, extra)


def checkpoint_step(run_dir: str | Path) -> int | None:
    """The step of the newest checkpoint of `run_dir` (None: it has none), read without loading it:
    a run asked to stop before it can be refused before the model loads."""
    path = latest_checkpoint(run_dir)
    return None if path is None else _read_state(path)[0]


def _read_state(path: Path) -> tuple[int, dict]:
    """The step and extra of the checkpoint folder `path` (its state.json), or a one-line error."""
    state = parse_json(read_text(path / STATE_FILE, "checkpoint state"), f"checkpoint {path / STATE_FILE}", None)
    return _step_and_extra(state, path)


def _step_and_extra(state, path: Path) -> tuple[int, dict]:
    """state.json's step (a whole number, not negative) and extra (a mapping), or a one-line error."""
    step = state.get("step") if isinstance(state, dict) else None
    extra = state.get("extra") if isinstance(state, dict) else None
    if type(step) is not int or step < 0 or not isinstance(extra, dict):
        raise UserError(f"checkpoint {path} is corrupt: its {STATE_FILE} must hold a whole-number step and an "
                        "extra mapping")
    return step, extra


def _restore_optimizer(optimizer: optim.Optimizer, model: nn.Module, saved: dict[str, mx.array], path: Path) -> None:
    """Fill the optimizer's own state tree leaf by leaf.

    The dict object stays the same, so a step function compiled over
    `optimizer.state` keeps working after a resume.
    """
    optimizer.init(model.trainable_parameters())
    current = dict(tree_flatten(optimizer.state))
    _check_same_shapes(saved, current, f"checkpoint {path} holds another optimizer's state")
    for name, value in saved.items():
        *parents, leaf = name.split(".")
        node = optimizer.state
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[leaf] = value


def _check_same_shapes(saved: dict[str, mx.array], expected: dict[str, mx.array], what: str) -> None:
    if set(saved) != set(expected):
        odd = sorted(set(saved) ^ set(expected))[0]
        raise UserError(f"{what} (different model, rank or fine-tune type?): {odd} is in one and not the other")
    for name, value in saved.items():
        if value.shape != expected[name].shape:
            raise UserError(f"{what}: {name} has shape {tuple(value.shape)}, expected {tuple(expected[name].shape)}")


def _prune(folder: Path, keep: int, current: str) -> None:
    """Keep the newest `keep` checkpoints (always `current`); also clear temp folders of killed saves."""
    for leftover in folder.glob(".step-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    names = sorted(p.name for p in folder.glob("step-*") if p.is_dir())
    for name in names[:-max(keep, 1)]:
        if name != current:
            shutil.rmtree(folder / name, ignore_errors=True)
