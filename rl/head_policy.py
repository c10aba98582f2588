"""The naming head as a policy that RL trains: its word choice, its log-probability, its updates.

Where the model writes ` Only`, the head names a whole allowed word (never one played or refused
there) from the model's hidden state h (llm/naming_head.py, llm/word_steering.py). That choice is
the part of an answer the head owns, so its probability is the head's, not the model's tokens':

    pi(w | h) = softmax over the words not banned of score(w; h) / T

at the sampling temperature T that play uses. With the model frozen, h is fixed for a position,
so a GRPO group is G words drawn from pi at one recorded h, each scored by the reward kernel as
the guess at that position (rl/reward.py `score_guess_rows`): no model pass is needed to sample a
group or to score its log-probabilities, and every group that holds a win or a better word has
signal. The update is GRPO's clipped ratio with the group's normalised advantages and the exact
KL to the start head over every word (not a sampled estimate); filtered expert iteration is the
cross-entropy toward the group's words that won.

What it trains (`params`): the head's three gains and its secret bias (the weights of its terms
and of the game's secret list, llm/naming_head.py), or its arrays. Its arrays (160k numbers)
learnt the few hundred states RL drew from and not held-out ones, as the LoRA under the head did
(results/head-rl/, results/lora-through-head/); four numbers cannot tell one position from
another, so what they learn holds everywhere: how much to trust each reading of the state, and
that a word the game never draws as a secret cannot win. The gains are trained as logarithms
(always positive), so weight decay pulls all four back toward the fitted head (log 1 = 0, b = 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from common.knobs import knob
from llm.naming_head import NamingHead, readout_logits

ARRAYS = ("down", "up", "letters")
HEAD_PARAMS = {"gains": ("log_gains", "secret_bias"), "arrays": ARRAYS}  # `params` choice -> what RL trains
# A banned word's score: finite, so that its probability is exactly 0 and the KL's and the loss's
# gradients stay finite (-inf there makes 0 * inf = nan in the backward pass).
BANNED_SCORE = -1e9


@dataclass(frozen=True)
class HeadBasis:
    """What scores words besides the head's own parameters (llm/word_steering.py `word_basis`)."""

    embeddings: mx.array  # (words, hidden) each word's first token's output embedding
    spelling: mx.array  # (words, 156)
    offsets: mx.array  # (words,)


HEAD_TRAIN = ("auto", "on", "off")


@dataclass(frozen=True)
class HeadRLSettings:
    """How RL trains a naming head (the `head` section of an RL config; rl/head_loop.py)."""

    train: str = knob("auto", "Train the start adapter's naming head, the model frozen: auto (when the start has "
                              "one), on (the start must have one) or off (LoRA RL, the head left out).",
                      choices=HEAD_TRAIN, flag="--head")
    games: int = knob(64, "Games on training secrets the model plays with its head first; the states where "
                          "the head named a word are the model's own positions RL trains at.",
                      range=(0, 100_000), flag="--head-games")
    teacher_share: float = knob(0.5, "Share of each step's states drawn from the head fit's positions (the "
                                     "teacher's thoughts) instead of the model's own games.", range=(0.0, 1.0))
    group_size: int = knob(16, "Words sampled from the head per recorded state (G).", range=(2, 1024))
    states_per_step: int = knob(64, "Recorded naming states per step (each one group).", range=(1, 100_000))
    lr: float = knob(3e-4, "AdamW learning rate of the head's parameters.", range=(0, 1), open_low=True)
    weight_decay: float = knob(1e-2, "AdamW weight decay of the head's parameters.", range=(0, 10))
    clip: float = knob(0.2, "GRPO's ratio clip.", range=(0, 10), open_low=True)
    kl_coef: float = knob(0.05, "Weight of the exact KL to the start head.", range=(0, 100))
    updates: int = knob(2, "Gradient updates per GRPO step on its groups (the ratio moves off 1 after the first).",
                        range=(1, 100))
    max_grad_norm: float = knob(1.0, "Gradient norm clip.", range=(0, 1e6), open_low=True)
    params: str = knob("gains", "What head RL trains: gains (four numbers: the weights of the head's terms, the "
                                "model's own word scores, the correction and the letter scores, and a bias "
                                "toward the game's secret list) or arrays (the head's 160k parameters, which "
                                "learnt their training states only, results/head-rl/).",
                       choices=tuple(HEAD_PARAMS), flag="--head-params")
    gains_lr: float = knob(1e-2, "AdamW learning rate of the gains' logarithms and the secret bias (params: gains).",
                           range=(0, 1), open_low=True)

    @property
    def learning_rate(self) -> float:
        return self.gains_lr if self.params == "gains" else self.lr


def head_parameters(head: NamingHead) -> dict[str, mx.array]:
    return {**{name: mx.array(getattr(head, name)) for name in ARRAYS}, "log_gains": mx.log(mx.array(head.gains)),
            "secret_bias": mx.array(head.secret_bias, dtype=mx.float32)}


def as_head(params: dict[str, mx.array], beta: float) -> NamingHead:
    return NamingHead(*(np.array(params[name], dtype=np.float32) for name in ARRAYS), beta,
                      np.exp(np.array(params["log_gains"], dtype=np.float32)), float(params["secret_bias"]))


def word_log_probs(params: dict[str, mx.array], basis: HeadBasis, states: mx.array, banned: mx.array,
                   temperature: float, possible: mx.array | None = None) -> mx.array:
    """(states, words) log pi(w | h) at `temperature`; banned words get `BANNED_SCORE` (probability 0);
    `possible` (states, words) is 1 where a word can be that state's game's secret (None: every word)."""
    scores = readout_logits(states, basis.embeddings, params["down"], params["up"], params["letters"],
                            basis.spelling, basis.offsets, mx.exp(params["log_gains"]), params["secret_bias"],
                            possible) / temperature
    scores = mx.where(banned, BANNED_SCORE, scores)
    return scores - mx.logsumexp(scores, axis=-1, keepdims=True)


def sample_words(log_probs: mx.array, group_size: int, key: mx.array) -> mx.array:
    """(states, G) words drawn from each row of `log_probs`."""
    return mx.random.categorical(log_probs[:, None, :], axis=-1, shape=(log_probs.shape[0], group_size), key=key)


def group_advantages(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, kept): each group's rewards less their mean over their std; groups whose
    rewards are all equal carry no signal and are dropped (kept False)."""
    spread = rewards.std(axis=1)
    kept = spread > 1e-9
    advantages = np.zeros_like(rewards)
    advantages[kept] = (rewards[kept] - rewards[kept].mean(axis=1, keepdims=True)) / spread[kept, None]
    return advantages, kept


def exact_kl(log_p: mx.array, log_ref: mx.array) -> mx.array:
    """Mean over states of KL(pi || pi_ref), summed over the words both allow."""
    return (mx.exp(log_p) * (log_p - log_ref)).sum(axis=-1).mean()


def grpo_loss(params: dict, basis: HeadBasis, states: mx.array, banned: mx.array, words: mx.array,
              old_log_probs: mx.array, advantages: mx.array, ref_log_probs: mx.array,
              settings: HeadRLSettings, temperature: float, possible: mx.array | None = None
              ) -> tuple[mx.array, mx.array]:
    """(loss, kl): GRPO's clipped surrogate over the sampled words, plus the KL to the start head."""
    log_p = word_log_probs(params, basis, states, banned, temperature, possible)
    chosen = mx.take_along_axis(log_p, words, axis=-1)
    ratio = mx.exp(chosen - old_log_probs)
    clipped = mx.clip(ratio, 1 - settings.clip, 1 + settings.clip)
    surrogate = mx.minimum(ratio * advantages, clipped * advantages).mean()
    kl = exact_kl(log_p, ref_log_probs)
    return -surrogate + settings.kl_coef * kl, kl


def expert_loss(params: dict, basis: HeadBasis, states: mx.array, banned: mx.array, targets: mx.array,
                weights: mx.array, ref_log_probs: mx.array, settings: HeadRLSettings,
                temperature: float, possible: mx.array | None = None) -> tuple[mx.array, mx.array]:
    """(loss, kl): cross-entropy toward the kept words (`weights` 1 for a kept word, 0 for padding),
    plus the KL to the start head, which keeps the words it was not shown where they were."""
    log_p = word_log_probs(params, basis, states, banned, temperature, possible)
    chosen = mx.take_along_axis(log_p, targets, axis=-1)
    nll = -(chosen * weights).sum() / mx.maximum(weights.sum(), 1.0)
    kl = exact_kl(log_p, ref_log_probs)
    return nll + settings.kl_coef * kl, kl


def clip_gradients(grads: dict, max_norm: float) -> tuple[dict, float]:
    """The gradients scaled down to `max_norm` when their global norm is larger, and that norm."""
    from mlx.optimizers import clip_grad_norm

    clipped, norm = clip_grad_norm(grads, max_norm)
    return clipped, float(norm)


def masked_rows(banned_lists: list[np.ndarray], words: int) -> mx.array:
    """(states, words) True at each state's banned words."""
    banned = np.zeros((len(banned_lists), words), dtype=bool)
    for row, indices in enumerate(banned_lists):
        banned[row, indices] = True
    return mx.array(banned)

