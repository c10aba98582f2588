"""An SFT run's settings: each knob declared once, for `sft`'s flags, its checks and its record.

The knobs that shape the optimizer or the adapter take over `OptimizerSettings`' and
`AdapterSettings`' declarations (`knob_like`): the range a flag accepts is the one the
trainer can use. The locations (model, data, out, start adapter) are plain fields, as
rl's are: their options carry path types and checks of their own (sft/commands.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import UserError
from common.knobs import check_knobs, knob, knob_like, knobs_of
from common.options import SEED
from llm.loading import DTYPE
from sft.lora import AdapterSettings
from sft.trainer import OptimizerSettings

_OPTIMIZER, _ADAPTER = knobs_of(OptimizerSettings), knobs_of(AdapterSettings)


@dataclass(frozen=True)
class SFTConfig:
    model: str
    data: str | None  # None: a continued run's own (run.json)
    out: str
    adapter: str | None = None
    iters: int = knob_like(_OPTIMIZER["total_steps"], help="Optimizer steps.", flag="--iters")
    rank: int = knob_like(_ADAPTER["rank"], flag="--rank")
    learning_rate: float = knob_like(_OPTIMIZER["learning_rate"], flag="--lr")
    warmup: int | None = knob_like(_OPTIMIZER["warmup_steps"], None, help="Warm-up steps [default: 5% of --iters].",
                                   flag="--warmup")
    batch_size: int = knob(4, "Examples per optimizer step.", range=(1, 4096), flag="--batch-size")
    max_seq_len: int = knob(1024, "Longest example allowed (longer ones are an error, never silently cut).",
                            range=(32, None), flag="--max-seq-len")
    full: bool = knob_like(_ADAPTER["full"], flag="--full")
    eval_every: int = knob(100, "Validation loss and a few held-out games every K steps.", range=(1, None),
                           flag="--eval-every")
    eval_games: int = knob(8, "Held-out games per eval (0: none).", range=(0, None), flag="--eval-games")
    save_every: int = knob(100, "Checkpoint every K steps.", range=(1, None), flag="--save-every")
    seed: int = knob_like(SEED)
    dtype: str = knob_like(DTYPE)  # full fine-tuning trains float32 weights under auto (sft/run.py)

    @property
    def warmup_steps(self) -> int:
        return self.iters // 20 if self.warmup is None else self.warmup

    def check(self) -> None:
        """One-line errors for values no run can use, each naming its flag: what a knob's declaration
        refuses (a run's record is checked so too), and a warm-up that would outlast the run."""
        check_knobs(self)
        if not 0 <= self.warmup_steps < self.iters:
            raise UserError(f"--warmup must be between 0 and --iters - 1, got {self.warmup_steps}")

    def trajectory(self, data_digest: str) -> dict:
        """What decides the weights at every step: a resumed run must agree on all of it."""
        return {**{k: getattr(self, k) for k in FIXED}, "warmup": self.warmup_steps, "train_sha256": data_digest}


# Every knob of a run, as its field declares it; the `sft` command's options are read off them.
KNOBS = knobs_of(SFTConfig)
# The flag behind each setting, as messages name it; FIXED ones (with --warmup and the train
# data) decide the weights at every step, so a continued run keeps them.
FLAGS = {"model": "--model", "data": "--data", "adapter": "--adapter",
         **{key: entry.knob.flag for key, entry in KNOBS.items()}, "train_sha256": "--data (its train.jsonl)"}
FIXED = ("model", "adapter", "iters", "rank", "learning_rate", "batch_size", "max_seq_len", "full", "seed")
MAY_CHANGE = "only --data (with the same train.jsonl), --eval-every, --eval-games, --save-every and --dtype may change"
