"""Held-out evaluation inside an RL run: the records it logs and the best checkpoint it keeps.

Every `eval_every` steps (and before the first and after the last) the policy plays
the same held-out validation games (eval/validation.py) and RUN/metrics.jsonl gets one
record with phase "heldout", its figures prefixed `heldout_`. The best of these evals
(`best_by` "wins": more wins, ties broken by consistency; "endgame": the higher closing
rate on the validation endgame positions, eval/endgame.py; the start model's eval counts)
is exported as RUN/best, a merged adapter like RUN/adapter, described by RUN/best.json.

The best so far travels in every checkpoint's `extra`, and a checkpoint is saved
before RUN/best is replaced; so a resume knows the best the interrupted run had
reached, and if the kill came between that checkpoint and the export, the weights it
loads are the best's and it finishes the export.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.errors import UserError
from common.fileio import atomic_write_json
from eval.validation import rank
from rl.policy import RLPolicy

BEST_BY = ("wins", "endgame")
ENDGAME = "endgame_"  # held-out endgame figures, inside a held-out record: heldout_endgame_closed_rate
PHASE = "heldout"  # the metrics phase of held-out records; every other phase is a training step
PREFIX = "heldout_"
BEST_DIR = "best"
BEST_FILE = "best.json"


def is_training_step(record: dict) -> bool:
    return record["phase"] != PHASE


def heldout_record(step: int, figures: dict) -> dict:
    """The metrics.jsonl line for one eval: figures prefixed, its time as every record's `seconds`."""
    named = {PREFIX + key: value for key, value in figures.items() if key != "seconds"}
    return {"step": step, "phase": PHASE, **named, "seconds": figures["seconds"]}


def figures_of(record: dict) -> dict:
    """The step and unprefixed figures of a held-out record (the inverse of `heldout_record`)."""
    return {"step": record["step"], **{k[len(PREFIX):]: v for k, v in record.items() if k.startswith(PREFIX)}}


class BestSoFar:
    """The best held-out eval of the run ({"step": k, **figures}) and its adapter in RUN/best."""

    def __init__(self, out: Path, best: dict | None = None, best_by: str = "wins") -> None:
        self.out, self.best, self.best_by = out, best, best_by

    @property
    def adapter(self) -> Path:
        return self.out / BEST_DIR

    def offer(self, figures: dict) -> bool:
        """Take this eval ({"step": k, **figures}) if it beats the best so far (an equal later one does not)."""
        order = rank if self.best_by == "wins" else endgame_rank
        if self.best is not None and order(figures) <= order(self.best):
            return False
        self.best = figures
        return True

    def export(self, policy: RLPolicy) -> None:
        """RUN/best from the policy as it is now (the best's weights), then RUN/best.json naming it."""
        policy.export(self.adapter)
        atomic_write_json(self.out / BEST_FILE, {**self.best, "adapter": str(self.adapter)})

    def resume(self, policy: RLPolicy, checkpoint_step: int) -> None:
        """Finish an export that a kill cut short: the checkpoint knows a best that RUN/best.json does not."""
        if self.best is None or self._saved_step() == self.best["step"]:
            return
        if self.best["step"] != checkpoint_step:
            raise UserError(f"--resume: {self.out / BEST_FILE} does not name the best eval the checkpoint "
                            f"recorded (step {self.best['step']}); was it edited or removed?")
        self.export(policy)

    def _saved_step(self) -> int | None:
        try:
            return json.loads((self.out / BEST_FILE).read_text())["step"]
        except (OSError, ValueError, KeyError, TypeError):
            return None


def endgame_rank(figures: dict) -> tuple[float, float]:
    """The order by the endgame benchmark: closing rate, then closing at one candidate left."""
    one = figures.get(ENDGAME + "one_candidate_closed_rate")
    return figures[ENDGAME + "closed_rate"], -1.0 if one is None else one


def heldout_summary(records: list[dict], best: BestSoFar) -> dict:
    """The run summary's held-out part: where RUN/best came from, and the first, best and last evals."""
    evals = [figures_of(r) for r in records if not is_training_step(r)]
    return {"best_step": best.best["step"] if best.best else None,
            "best_adapter": str(best.adapter) if best.best else None,
            "heldout_start": evals[0] if evals else None, "heldout_best": best.best,
            "heldout_last": evals[-1] if evals else None}
