"""An RL run's folder as both kinds of RL keep it: the request that starts or resumes a run, and the
files a resume reads (the config, the model, a copy of the start adapter).

LoRA RL (rl/lora_loop.py) and head RL (rl/head_loop.py) write the same files, so `rl` resumes either
by one rule (run the same command again), and rl/loop.py, above both, chooses between them.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError
from common.fileio import atomic_replace_dir, atomic_write_json
from llm.adapter_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from rl.config import RLConfig, build_config, load_config_file
from rl.heldout import BEST_DIR, BEST_FILE
from sft.checkpoint import latest_checkpoint

CONFIG_FILE = "config.json"
RUN_FILE = "run.json"  # the model and start adapter, for --resume
START_ADAPTER = "start_adapter"  # a copy of --adapter: a resume does not depend on the original


@dataclass(frozen=True)
class RunRequest:
    model: str
    adapter: str | None  # the adapter RL starts from (fused in; see rl/policy.py)
    out: Path
    config: RLConfig
    resume: bool = False
    show_progress: bool = True


def resume_request(out: Path, steps: int | None, show_progress: bool = True) -> RunRequest:
    """The run in `out` as it started (only `steps` may change, to run longer).

    A run killed before its first checkpoint has its settings saved but nothing to
    resume: the request then starts it again from step 0 (`resume` False).
    """
    saved = (out / CONFIG_FILE).is_file() and (out / RUN_FILE).is_file()  # config.json is written last
    if latest_checkpoint(out) is None and not saved:
        raise UserError(f"--resume: {out} has no checkpoint to resume from and no saved settings; "
                        "run the same command again without --resume")
    if not saved:
        raise UserError(f"--resume: {out} has no {CONFIG_FILE} or {RUN_FILE}; is it an RL run folder?")
    config = build_config(load_config_file(out / CONFIG_FILE), {"steps": steps} if steps is not None else None,
                          str(out / CONFIG_FILE))
    run = _read_run_file(out / RUN_FILE)
    adapter = str(out / START_ADAPTER) if run["start_adapter"] else None
    return RunRequest(run["model"], adapter, out, config, resume=latest_checkpoint(out) is not None,
                      show_progress=show_progress)


def _read_run_file(path: Path) -> dict:
    """RUN/run.json ({"model": spec, "start_adapter": path or null}), or a one-line error."""
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"--resume: cannot read {path}: {' '.join(str(err).split())[:200]}") from err
    if (not isinstance(run, dict) or not isinstance(run.get("model"), str)
            or not isinstance(run.get("start_adapter"), (str, type(None)))):
        raise UserError(f'--resume: {path} is corrupt: it must hold {{"model": "...", "start_adapter": "..." or null}}')
    return run


def start_run_folder(out: Path, model_spec: str, adapter: str | None, config: RLConfig) -> None:
    """The files a resume needs: the config, the model, and a copy of the start adapter.

    What a run killed before its first checkpoint left (its step-0 eval, RUN/best) goes first.
    """
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").unlink(missing_ok=True)
    (out / BEST_FILE).unlink(missing_ok=True)
    shutil.rmtree(out / BEST_DIR, ignore_errors=True)
    if adapter is not None:
        def copy(tmp: Path) -> None:
            for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
                shutil.copy2(Path(adapter) / name, tmp / name)

        atomic_replace_dir(out / START_ADAPTER, copy)
    atomic_write_json(out / RUN_FILE, {"model": model_spec, "start_adapter": adapter})
    atomic_write_json(out / CONFIG_FILE, config.to_json())
