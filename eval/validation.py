"""Held-out games played inside training: the same validation secrets and seed every time.

SFT and RL call one `HeldOutEval` every few steps with the model they are training.
The secrets come from the validation third of the held-out words (eval/splits.py), so
choosing a checkpoint by these games never looks at the test words. The player
draws each answer from the eval's own seed, the game and the answer's number
(llm/player.py), so the same weights play the same games: a change in the figures is
a change in the model, not in the dice. Training's random key and the model's
train/eval mode are put back afterwards, so a run with evals trains exactly as one
without them would.
"""

from __future__ import annotations

import contextlib
import time

import mlx.core as mx

from common.errors import UserError, note
from eval.harness import evaluate
from eval.splits import held_out_validation, sample_secrets
from llm.generation import SamplingSettings
from llm.player import ModelPlayer
from solver.setup import Setup

# The summary figures a training run logs for its held-out games (eval/harness.py names them).
FIGURES = ("games", "wins", "win_rate", "mean_guesses", "format_valid_rate", "invalid_word_rate", "repeat_rate",
           "consistency_rate", "later_consistency_rate", "mean_regret_bits", "lost_to_invalid")


class HeldOutEval:
    """Plays a fixed set of validation secrets with whatever model it is handed."""

    def __init__(self, setup: Setup, games: int, seed: int, sampling: SamplingSettings = SamplingSettings(),
                 batch_size: int = 32) -> None:
        pool = held_out_validation(setup.lists.secrets(setup.secret_kind))
        if not pool:
            raise UserError(f"the {setup.secret_kind} list has no held-out validation words to evaluate on")
        self.setup, self.seed, self.sampling, self.batch_size = setup, seed, sampling, batch_size
        if games > len(pool):
            note(f"held-out evals play all {len(pool)} validation secrets, fewer than the {games} games asked for")
        self.secrets = sample_secrets(pool, games, seed)

    def __call__(self, model, tokenizer) -> dict:
        """FIGURES of one round of games, plus the sampling temperature and the seconds it took."""
        began = time.perf_counter()
        with evaluating(model):
            player = ModelPlayer(model, tokenizer, "held-out", self.sampling, self.seed, self.batch_size)
            summary, _ = evaluate(player, self.setup, self.secrets, show_progress=False)
        return {**{k: summary[k] for k in FIGURES}, "temperature": self.sampling.temperature,
                "seconds": round(time.perf_counter() - began, 3)}


@contextlib.contextmanager
def evaluating(model):
    """The model in eval mode with its own dice for the block; training's mode and mlx key put
    back afterwards, so a run with held-out evals trains exactly as one without them."""
    key = mx.array(mx.random.state[0])  # the players draw none of it; whatever else the block draws is undone
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)
        mx.random.state[0][...] = key


def rank(figures: dict) -> tuple[int, float]:
    """The order checkpoints are chosen by: more wins, then more guesses consistent with the feedback."""
    consistency = figures.get("consistency_rate")
    return figures["wins"], -1.0 if consistency is None else consistency
