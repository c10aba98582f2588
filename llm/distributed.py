"""Data parallelism over mlx's own distributed layer: one copy of the model per process.

`mlx.launch -n N python cli.py sft|rl ...` starts N processes (ranks) that
`mx.distributed.init()` joins over whatever backend mlx.launch set up (ring, MPI,
NCCL, JACCL). Each rank trains on its share of every batch; before each optimizer
step the gradients are combined with mlx's `average_gradients` (as mlx-lm's trainer
does), so every rank takes the same step and holds the same weights throughout.
Rank 0 alone writes files and shows progress; figures are summed over ranks so that
a step's numbers are the whole step's.

A process started without mlx.launch is a group of one: then every function here
returns its input untouched and no collective runs, so a plain run is what it was.
Every rank must call the collectives (`total`, `combine_gradients`, `gather_json`,
`main_decides`, `barrier`) in the same order, or the run waits forever.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, TypeVar

import mlx.core as mx
import numpy as np
from mlx.nn.utils import average_gradients
from mlx.utils import tree_map

from common.errors import UserError

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    rank: int
    size: int

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files, metrics and the progress display."""
        return self.rank == 0


@functools.cache
def world() -> World:
    group = mx.distributed.init()
    return World(group.rank(), group.size())


def mine(items: list[T]) -> list[T]:
    """This rank's share of a global batch: every N-th item from its rank on (mlx-lm's split)."""
    w = world()
    return items if w.size == 1 else items[w.rank::w.size]


def portion(count: int, what: str) -> int:
    """How many of `count` (games, states, examples) this rank takes; the shares add up to `count`."""
    w = world()
    if w.size == 1:
        return count
    if count < w.size:
        raise UserError(f"{what} is {count}: too few to share among {w.size} processes")
    return count // w.size + (w.rank < count % w.size)


def rank_seed(seed: int) -> int:
    """`seed` on rank 0 (so rank 0, like a single process, draws what it always did); a distinct one per other rank."""
    rank = world().rank
    return seed if rank == 0 else int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def all_sum(x: mx.array) -> mx.array:
    """mlx's all_sum; the array itself in a single process (usable inside `mx.compile`)."""
    return x if world().size == 1 else mx.distributed.all_sum(x)


def total(values: float | list[float]) -> Any:
    """Host numbers summed over ranks (a float, or a list of them in one collective)."""
    if world().size == 1:
        return values
    summed = np.array(all_sum(mx.array(np.atleast_1d(np.asarray(values, np.float64)), mx.float32)))
    return summed.tolist() if isinstance(values, (list, tuple)) else float(summed[0])


def pooled_std(values: np.ndarray) -> float:
    """The std of every rank's `values` taken together (numpy's own std in a single process)."""
    if world().size == 1:
        return float(values.std()) if values.size else 0.0
    n, s, squares = total([values.size, float(values.sum()), float(np.square(values).sum())])
    return float(np.sqrt(max(squares / n - (s / n) ** 2, 0.0))) if n else 0.0


def combine_gradients(grads, weight: float | mx.array = 1.0):
    """The sum over ranks of `weight * grads`, by mlx's `average_gradients` (the mean) times N.

    With `weight` = this rank's share of the batch's loss terms (its tokens over all ranks'
    tokens, so the weights sum to 1), the result is the gradient of the whole batch's
    mean loss: the step one process would take on the global batch.
    """
    size = world().size
    if size == 1:
        return grads
    return average_gradients(tree_map(lambda g: g * (weight * size), grads))


def gather_json(value: Any) -> list:
    """Every rank's JSON-able `value`, in rank order (mlx's all_gather of the encoded bytes)."""
    if world().size == 1:
        return [value]
    data = np.frombuffer(json.dumps(value).encode(), np.uint8)
    width = int(mx.distributed.all_max(mx.array([data.size])).item())
    padded = np.zeros((1, width), np.uint8)
    padded[0, :data.size] = data
    rows = np.array(mx.distributed.all_gather(mx.array(padded)))
    return [json.loads(bytes(row).rstrip(b"\0")) for row in rows]  # JSON text never holds a NUL byte


def main_decides(flag: bool) -> bool:
    """Rank 0's `flag`, on every rank (the others' argument is ignored)."""
    w = world()
    if w.size == 1:
        return flag
    return total(float(flag) if w.is_main else 0.0) > 0


def barrier() -> None:
    """Wait until every rank gets here (e.g. all have checked a folder before rank 0 writes it)."""
    if world().size > 1:
        mx.eval(mx.distributed.all_sum(mx.array([1.0])))


def check_same_size(saved: int) -> None:
    """A run resumes with the number of processes it was checkpointed by: each rank's data and dice depend on it."""
    size = world().size
    if saved != size:
        raise UserError(f"--resume: the run was checkpointed by {saved} process(es), this one has {size}; "
                        f"resume it with {'mlx.launch -n ' + str(saved) + ' ' if saved > 1 else ''}the same command")
