"""kill -9 at random moments of the pipeline (gen-sft, sft, rl, evals, checkpoint and export writes);
each rerun of the same command continues, and the finished run equals one never interrupted.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_model import cached_tiny_model

from common.fileio import LEFTOVER
from common.run_lock import run_lock
from rl.pipeline import MODELS, STAGES_FILE, START_HEAD_MODEL

REPO = Path(__file__).resolve().parent.parent
LAUNCH = """
import sys
from pathlib import Path
from rl.pipeline import PipelineSettings, run_pipeline
start = {"sft_start": sys.argv[3], "start_head": 4, "head_rl_steps": 4, "head_games": 2, "head_eval_every": 1} \\
    if len(sys.argv) > 3 else {}
settings = PipelineSettings(model=sys.argv[1], sft_games=12, sft_iters=4, rl_steps=4, rl_games=2, group_size=2,
                            eval_games=3, max_tokens=12, **start)
run_pipeline(Path(sys.argv[2]), settings, show_progress=False)
"""
TIMING = ("seconds", "per_second", "per_minute", "per_s", "peak_memory", "rollout_share")  # rollout_share: of the step's seconds
PATHS = ("run", "adapter", "best_adapter", "policy", "states", "naming_head")  # name the run folder


def pipeline(model: Path, out: Path, start: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", LAUNCH, str(model), str(out), *([str(start)] if start else [])],
                            cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def sft_start(model: Path, folder: Path) -> Path:
    """A LoRA adapter on the tiny model, to start the pipeline from."""
    import mlx.core as mx

    from llm.adapter_files import save_adapter
    from llm.loading import load_model
    from sft.lora import AdapterSettings, attach_adapter, trainable_weights

    loaded, _ = load_model(str(model))
    mx.random.seed(0)
    config = attach_adapter(loaded, AdapterSettings(rank=2))
    return save_adapter(folder, trainable_weights(loaded), config)


def without_timing(value):
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items()
                if not any(t in k for t in TIMING) and k not in PATHS}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def results(out: Path) -> dict:
    stages = json.loads((out / STAGES_FILE).read_text())["stages"]
    games = {m: json.loads((out / f"eval-{m}.json").read_text())["per_game"] for m in (*MODELS, START_HEAD_MODEL)
             if (out / f"eval-{m}.json").is_file()}
    rl = [json.loads(line) for line in (out / "rl" / "metrics.jsonl").read_text().splitlines()]
    return without_timing({"stages": {k: v for k, v in stages.items() if k != "gen-sft"}, "games": games, "rl": rl})


def differences(a, b, where: str = "") -> list[str]:
    """Where two results differ, down to the leaf: `rl[2].loss: -0.1 != -0.2`."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r:.80} != {b!r:.80}"]


@pytest.mark.slow
@pytest.mark.parametrize("from_start", [False, True], ids=["from-scratch", "from-an-sft-start"])
def test_pipeline_killed_at_random_moments_finishes_as_if_never_killed(tmp_path_factory, tmp_path, from_start):
    """From scratch, and from an SFT start (the default model's CPU path: head fit, head RL)."""
    model = cached_tiny_model(tmp_path_factory.mktemp("tiny"))
    start = sft_start(model, tmp_path / "start") if from_start else None
    began = time.monotonic()
    reference = pipeline(model, tmp_path / "reference", start)
    assert reference.wait() == 0, reference.stderr.read().decode()[-2000:]
    seconds = time.monotonic() - began

    out, chance, kills = tmp_path / "killed", random.Random(16), 0
    while True:
        process = pipeline(model, out, start)
        try:
            # Three delays of at most a third of the whole run each: at least three kills land.
            code = process.wait(timeout=chance.uniform(0.5, seconds / 3) if kills < 8 else None)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
            continue
        assert code == 0, process.stderr.read().decode()[-2000:]
        break
    assert kills >= 3, kills
    killed, reference = results(out), results(tmp_path / "reference")
    assert killed == reference, differences(killed, reference)
    for folder in (out, out / "sft", out / "rl"):
        assert not [p.name for p in folder.iterdir() if LEFTOVER.match(p.name)], folder
    with run_lock(out):  # no kill left it held
        pass
