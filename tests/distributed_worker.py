"""One SFT step and one GRPO update on a fixed global batch, this process's share of it.

Both take plain SGD at learning rate 1 without clipping, so the change in the weights
is the gradient itself: Adam's first step is nearly the gradient's sign and would
hide a gradient of the wrong scale (a mean of ranks' gradients where a sum is due).

Run by tests/test_distributed.py under `mlx.launch --backend ring -n 2` (each rank
writes its weights after each update), and imported by that test to make the same
updates in one process on the whole batch; the two must agree.

    python tests/distributed_worker.py MODEL_DIR OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_map

from llm import distributed
from llm.format import format_answer, messages, prompt_tokens
from llm.generation import Completion
from llm.loading import load_model
from rl.grpo import GrpoLearner, GrpoSettings
from rl.reward import RewardScorer
from rl.rollout import Group
from sft.lora import AdapterSettings, attach_adapter, trainable_weights
from sft.trainer import OptimizerSettings, SFTTrainer, collate
from solver.feedback import feedback
from solver.setup import load_setup

SHORT_SYSTEM = "Play Wordle: reply <think>why</think><guess>word</guess>."
# (secret, first guess, answer texts): positions after one guess, with answers of unequal length.
POSITIONS = (
    ("bunny", "salet", [format_answer("fits", "bunny"), "<guess>zzzzz</guess> oops",
                        format_answer("x", "qqqqq"), format_answer("hmm, a longer thought here", "corny")]),
    ("crane", "moist", [format_answer("short", "crane"), format_answer("no", "trace"), "nothing at all",
                        format_answer("maybe", "brace")]),
    ("ghost", "crane", [format_answer("g", "ghost"), format_answer("it could be this one", "moist"),
                        format_answer("p", "pluck"), "<guess>ghost"]),
)


def fresh_model(model_dir: str):
    """The tiny model with a rank-4 adapter, the same on every rank (same seed), nudged off zero."""
    model, tokenizer = load_model(model_dir)
    mx.random.seed(0)
    attach_adapter(model, AdapterSettings(rank=4))
    model.update(tree_map(lambda p: p + 0.005, model.trainable_parameters()))
    return model, tokenizer


def positions(setup):
    return [(setup.start.play(first, feedback(first, secret)), secret, texts) for secret, first, texts in POSITIONS]


def sft_step(model_dir: str, setup) -> tuple[dict[str, np.ndarray], dict]:
    """One SFT step on the 4 answers of the first position plus 2 of the second (6 examples in all)."""
    model, tokenizer = fresh_model(model_dir)
    conversations = []
    for state, _, texts in positions(setup)[:2]:
        system, user = messages(state)
        conversations += [[{**system, "content": SHORT_SYSTEM}, user, {"role": "assistant", "content": t}]
                          for t in texts]
    trainer = SFTTrainer(model, tokenizer, OptimizerSettings(grad_clip=1e9), optim.SGD(learning_rate=1.0))
    examples = trainer.tokenize(conversations[:6])
    stats = trainer.train_step(collate(distributed.mine(examples)))
    return _weights(model), {"loss": stats.loss, "tokens": stats.tokens, "grad_norm": stats.grad_norm}


def grpo_update(model_dir: str, setup) -> tuple[dict[str, np.ndarray], dict]:
    """One GRPO update (batch-std advantages, KL to the adapter-free model) on 3 groups: rank 0 gets 2."""
    model, tokenizer = fresh_model(model_dir)
    scorer = RewardScorer(setup)
    groups = []
    for state, secret, texts in positions(setup):
        completions = [Completion(t, tuple(tokenizer.encode(t, add_special_tokens=False)), "stop") for t in texts]
        groups.append(Group(state, secret, prompt_tokens(tokenizer, state), completions,
                            scorer.score(texts, state, secret)))
    learner = GrpoLearner(model, GrpoSettings(micro_batch_tokens=48, max_grad_norm=1e9), 0.7, tokenizer.eos_token_id)
    learner.optimizer = optim.SGD(learning_rate=1.0)
    figures = learner.update(distributed.mine(groups))
    return _weights(model), {k: figures[k] for k in ("loss", "kl", "grad_norm", "trained_tokens")}


def _weights(model) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in trainable_weights(model).items()}


def main(model_dir: str, out: Path) -> None:
    setup = load_setup("answers")
    rank = distributed.world().rank
    for name, update in (("sft", sft_step), ("grpo", grpo_update)):
        weights, figures = update(model_dir, setup)
        np.savez(out / f"{name}-rank{rank}.npz", **weights)
        (out / f"{name}-rank{rank}.json").write_text(json.dumps(figures))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
