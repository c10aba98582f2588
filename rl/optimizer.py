"""The optimizer both RL phases use: bias-corrected Adam with a short linear warm-up.

mlx's `Adam` leaves bias correction off by default. Its first moments then start at
a tenth of the gradient and its second moments at a thousandth of its square, so the
first updates move every weight by about sqrt(1000)/10 ~ 3x the learning rate
whatever the gradient's size (measured: one GRPO update at lr 5e-5 moved all 256
`q_proj.lora_b` weights of a layer by a median 3.16 x lr). RL starts from a trained
adapter, where such a jolt undoes what SFT taught; with bias correction a step is
at most about the learning rate, and the warm-up lets the moment estimates settle
before it reaches full size. The rate is never 0 (the first update already moves
the weights by lr / (warmup + 1)): on a CPU every RL update costs minutes.

The step count lives in the optimizer's own state, so a checkpoint that saves the
state (sft/checkpoint.py) resumes the warm-up exactly where it was.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.optimizers as optim


def warmup_schedule(learning_rate: float, warmup_steps: int):
    """lr * min(1, (step + 1) / (warmup_steps + 1)) for the optimizer's 0-based step count."""
    def rate(step: mx.array) -> mx.array:
        return learning_rate * mx.minimum(1.0, (step + 1) / (warmup_steps + 1))

    return rate


def rl_optimizer(learning_rate: float, warmup_steps: int) -> optim.Adam:
    return optim.Adam(learning_rate=warmup_schedule(learning_rate, warmup_steps), bias_correction=True)
