"""The kinds of folder the commands make (a gen-sft dataset, an SFT, RL, pipeline, distill or output-rl run),
and how each is told by the one file only it writes there.

Two rules read this table. A command's --out takes an empty folder or one of its own kind
(sft/run_folder.py `claim`); and no output file (--json, --png) lands inside a folder of any
kind (common/options.py): `gen-sft --json OTHER_DATA/train.jsonl` replaced another dataset's
training file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Output:
    """One command's kind of folder: what it is called, and the names it writes there."""

    label: str
    names: frozenset[str]
    marker: str  # a file only this kind writes (run.json is told apart by what it holds)


OUTPUTS = {
    "gen-sft": Output("a gen-sft dataset", frozenset({"train.jsonl", "valid.jsonl", "test.jsonl", "hf",
                                                      "manifest.json"}), "manifest.json"),
    "sft": Output("an SFT run", frozenset({"run.json", "checkpoints", "latest", "metrics.jsonl", "adapter",
                                           "fused"}), "run.json"),
    "rl": Output("an RL run", frozenset({"run.json", "config.json", "start_adapter", "checkpoints", "latest",
                                         "metrics.jsonl", "adapter", "best", "best.json"}), "run.json"),
    "pipeline": Output("a pipeline run", frozenset({"stages.json", "data", "sft", "rl", "summary.json",
                                                    "eval-base.json", "eval-sft.json", "eval-rl.json"}),
                       "stages.json"),
    "distill": Output("a distill run", frozenset({"distill.json", "checkpoints", "latest", "metrics.jsonl", "adapter",
                                                  "best", "summary.json"}), "distill.json"),
    "output-rl": Output("an output-rl run", frozenset({"output_rl.json", "states.npz", "metrics.jsonl", "summary.json",
                                                       "model"}), "output_rl.json"),
}
# What each run's run.json holds that the other's does not.
RUN_FILE_KEYS = {"sft": "trajectory", "rl": "start_adapter"}


def kinds_marked(folder: Path, entries: set[str]) -> set[str]:
    """The kinds whose marker file `folder` holds, among its `entries`."""
    kinds = {kind for kind, output in OUTPUTS.items() if output.marker in entries and output.marker != "run.json"}
    if "run.json" in entries:
        try:
            record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = None  # damaged: the run's own resume says so
        if isinstance(record, dict):
            kinds |= {kind for kind, key in RUN_FILE_KEYS.items() if key in record}
    return kinds


def made_folder(path: str | os.PathLike) -> tuple[Path, str] | None:
    """The nearest folder above `path` (symlinks followed) that a command made, with its kind's label."""
    markers = {output.marker for output in OUTPUTS.values()}
    for folder in Path(os.path.realpath(path)).parents:
        kinds = kinds_marked(folder, {marker for marker in markers if (folder / marker).is_file()})
        if kinds:
            return folder, OUTPUTS[min(kinds)].label
    return None
