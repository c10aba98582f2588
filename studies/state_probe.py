"""Which of the model's states holds the one candidate's letters best?

The naming head (rl/naming_head.py) reads the final hidden state at the ` Only` token, and its held-
out figure barely moves with more positions (results/head-scale/). Is that state the wrong place to
read? This study runs the frozen start once over each naming context (the teacher's, as the head's
fit sees it) and keeps, per position, the state at the last token after several layers, and the mean
state over the thought and over the prompt; then it fits a ridge probe of the secret's letter at
each of the five places from each kind of state on training positions and scores it on held-out
validation ones (the head's own splits). A state that names the letters better would be the
head's better input. Run from the repository root:

    python -m studies.state_probe --adapter runs/gpu-sft-2400 --positions 640 \\
        --cache runs/letter-probe/feats-640.npz --json results/head-scale/state-probe-640.json

The states are saved to `--cache` (1.5 s a position on a 2-core CPU) and read from it when it exists.
`--head-states FILE` also probes a `naming-head` states file (the final state at the last token) on
its first 640, 1,280, ... training positions: how the best probe grows with data.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np

from common.errors import run_script
from common.fileio import atomic_write, atomic_write_json
from llm.blas import ensure_fast_blas

LAYERS = (8, 12, 16, 20, 24)  # of SmolLM2-135M's 30; the final one is read after the model's norm
RIDGE = (10.0, 100.0, 1000.0)  # the probe keeps whichever scores best on validation
COMBINATIONS = (("last_final", "thought_final"), ("last_final", "thought_L16"))


def capture(adapter: str, positions: int) -> dict[str, np.ndarray]:
    """Every kind of state at each of the head's training and validation positions, and the secrets."""
    import mlx.core as mx
    from mlx_lm.models.base import create_attention_mask

    from llm.format import prompt_tokens
    from llm.loading import load_model
    from rl.naming_head import HeadSettings, head_positions, naming_context

    splits = head_positions(HeadSettings(positions=positions))
    model, tokenizer = load_model("default", adapter, "auto")
    model.eval()
    arrays: dict[str, np.ndarray] = {}
    started = time.perf_counter()
    for name, split in splits.items():
        rows: dict[str, list[np.ndarray]] = {}
        for done, position in enumerate(split):
            context = naming_context(tokenizer, position)
            thought = len(prompt_tokens(tokenizer, position.state, position.rejected))
            hidden = model.model.embed_tokens(mx.array([context]))
            mask = create_attention_mask(hidden, None)
            kept = {}
            for depth, layer in enumerate(model.model.layers, 1):
                hidden = layer(hidden, mask, cache=None)
                if depth in LAYERS:
                    kept[f"last_L{depth}"] = hidden[0, -1]
                    kept[f"thought_L{depth}"] = hidden[0, thought:].mean(axis=0)
            final = model.model.norm(hidden)[0]
            kept |= {"last_final": final[-1], "thought_final": final[thought:].mean(axis=0),
                     "prompt_final": final[:thought].mean(axis=0)}
            mx.eval(kept)
            for kind, state in kept.items():
                rows.setdefault(kind, []).append(np.array(state.astype(mx.float32)))
            if done % 100 == 0:
                print(f"{name} {done}/{len(split)} positions, {time.perf_counter() - started:.0f} s", flush=True)
        arrays |= {f"{name}/{kind}": np.stack(states) for kind, states in rows.items()}
        arrays[f"{name}/secrets"] = np.array([p.secret for p in split])
    return arrays


def probe(train: np.ndarray, validation: np.ndarray, train_secrets: np.ndarray,
          validation_secrets: np.ndarray) -> dict:
    """The ridge probe's held-out accuracy at each place, for the ridge that scores best. The five
    places' letters are the first 5 x 26 spelling features, solved for in one system per ridge."""
    from llm.naming_head import LETTERS, spelling_features

    places = slice(0, 5 * LETTERS)
    targets = spelling_features(list(train_secrets))[:, places]
    truth = spelling_features(list(validation_secrets))[:, places].reshape(-1, 5, LETTERS).argmax(axis=2)
    mean, scale = train.mean(axis=0), train.std(axis=0) + 1e-6
    a, b = (train - mean) / scale, (validation - mean) / scale
    best: dict = {}
    for ridge in RIDGE:
        weights = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ targets)
        named = (b @ weights).reshape(-1, 5, LETTERS).argmax(axis=2)
        accuracy = [float(hit) for hit in (named == truth).mean(axis=0)]
        if not best or np.mean(accuracy) > np.mean(best["accuracy_by_place"]):
            best = {"ridge": ridge, "accuracy_by_place": accuracy, "mean_accuracy": round(float(np.mean(accuracy)), 4)}
    return best


@click.command()
@click.option("--adapter", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--positions", type=int, default=640, show_default=True, help="Training positions (the head's).")
@click.option("--cache", required=True, type=click.Path(dir_okay=False), help="The states, saved and reused (.npz).")
@click.option("--head-states", type=click.Path(exists=True, dir_okay=False),
              help="A naming-head states file to probe at growing training counts.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write every probe's figures here.")
def main(adapter: str, positions: int, cache: str, head_states: str | None, json_out: str | None) -> None:
    ensure_fast_blas()
    path = Path(cache)
    if not path.exists():
        arrays = capture(adapter, positions)

        def write(tmp: str) -> None:  # whole or not at all: a killed capture leaves no cache to trust
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)

        atomic_write(path, write)
    with np.load(path) as saved:
        arrays = {key: saved[key] for key in saved.files}
    kinds = sorted({key.split("/")[1] for key in arrays if not key.endswith("secrets")})
    rows = []
    for parts in [(kind,) for kind in kinds] + list(COMBINATIONS):
        figures = probe(*(np.concatenate([arrays[f"{split}/{kind}"] for kind in parts], axis=1)
                          for split in ("train", "validation")),
                        arrays["train/secrets"], arrays["validation/secrets"])
        rows.append({"state": "+".join(parts), **figures})
        print(f"{'+'.join(parts):26s} held-out letter accuracy by place "
              f"{' '.join(f'{a:.2f}' for a in figures['accuracy_by_place'])}, mean {figures['mean_accuracy']:.3f}")
    by_count = probe_by_count(Path(head_states)) if head_states else []
    if json_out:
        atomic_write_json(Path(json_out), {"adapter": adapter, "positions": {split: len(arrays[f"{split}/secrets"])
                                                                              for split in ("train", "validation")},
                                           "probes": rows, "head_states": head_states, "by_count": by_count})


def probe_by_count(path: Path) -> list[dict]:
    """The last token's final state from a naming states file, probed on 640, 1,280, ... positions."""
    with np.load(path) as saved:
        train, validation = saved["train_states"], saved["validation_states"]
        secrets = {split: np.array([key.split(":")[0] for key in saved[f"{split}_keys"]])
                   for split in ("train", "validation")}
    rows, count = [], 640
    while count <= len(train):
        figures = probe(train[:count], validation, secrets["train"][:count], secrets["validation"])
        rows.append({"training_positions": count, **figures})
        print(f"last_final, {count:5d} training positions: held-out letter accuracy by place "
              f"{' '.join(f'{a:.2f}' for a in figures['accuracy_by_place'])}, mean {figures['mean_accuracy']:.3f}")
        count *= 2
    return rows


if __name__ == "__main__":
    run_script(main)
