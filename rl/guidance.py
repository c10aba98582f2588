"""Expert-guided GRPO groups: the expert's answer joins each group as one more member.

Why: a small model that rarely writes a guess fitting the clues (about 1 answer in 20
after the opener, for the pipeline's SFT model) fills a group of 4 with answers that
fail alike; their rewards tie, the group is dropped, and the position teaches nothing
(5-62% of a step's groups in the CPU runs of results/). With the expert's answer, the
move and thought expert iteration would teach there, scored beside the samples, every
group whose samples fall short of the expert carries a signal. This is mixed-policy
GRPO (LUFFY, Yan et al. 2025) with the solver as the off-policy source.

The baseline stays the mean of the sampled answers (rl/grpo.py `advantages`): the
samples are ranked among themselves as without guidance, and the expert's answer is
weighted by how much better than them it is; a group whose samples all failed alike
teaches the expert's answer alone instead of pushing every sample down.
With one update per batch (the default) every member's importance ratio is 1, the
expert's included, so its term is supervised learning scaled by its advantage. The
expert's answer never advances a game and stays out of the rollout's reward figures,
which describe the model's own answers.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llm.generation import Completion
from llm.tokenizing import tokens_after
from rl.reward import RewardScorer
from rl.rollout import Group
from sft.cot import expert_answer
from solver.policy import Policy


class ExpertGuide:
    """Adds the expert's answer to groups (`guide(group)`), scored with the samples."""

    def __init__(self, expert: Policy, tokenizer, scorer: RewardScorer) -> None:
        self.expert = expert
        self.tokenizer = tokenizer
        self.scorer = scorer

    def __call__(self, group: Group) -> Group:
        text = expert_answer(self.expert, group.state)
        tokens = tokens_after(self.tokenizer, "\n", [text])[0]  # as the model writes it after the chat's prompt
        completions = [*group.completions, Completion(text, tokens, "stop")]
        rewards = self.scorer.score([c.text for c in completions], group.state, group.secret)
        return replace(group, completions=completions, rewards=rewards, expert_members=group.expert_members + 1)


def guidance_figures(groups: list[Group]) -> dict[str, float]:
    """How the guided groups of a step stood: the expert's mean reward, the share of groups
    where it scored highest (ties included), and the share where a sample matched it."""
    if not groups:
        return {}
    expert = np.array([g.rewards.total[-1] for g in groups])
    best_sample = np.array([g.rewards.total[:-1].max() for g in groups])
    return {"expert_reward_mean": float(expert.mean()),
            "expert_top_share": float(np.mean(expert >= best_sample)),
            "sample_matched_expert_share": float(np.mean(best_sample >= expert - 1e-9))}
