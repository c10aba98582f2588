"""Rollouts: whole games played by the model, a group of answers at every position.

Every round, each unfinished game asks for `group_size` answers to its current
position, all games and all members in one batched generation (the prompt's KV
cache is prefilled once per position and shared by its group). The kernel scores
each group; one member is played — the best, or one drawn at random so later turns
stay on-policy — and the games advance. An unplayable answer costs a turn's chance
without being played (the next prompt names it); three in a row lose the game, as in eval.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from eval.harness import GameRecord
from llm.format import Rejection, prompt_tokens
from llm.generation import Completion, SamplingSettings, sample
from rl.reward import COMPONENTS, GroupRewards, RewardScorer
from sft.states import StartState
from solver.state import GameState

CHOICES = ("best", "sampled")


@dataclass(frozen=True)
class RolloutSettings:
    group_size: int = 8  # answers sampled at each position
    games_per_round: int = 4  # fresh games started each time more groups are wanted
    choose: str = "sampled"  # which member advances the game: "best" or "sampled"
    temperature: float = SamplingSettings.temperature  # eval's: training answers are the answers eval sees
    top_p: float = 1.0
    max_tokens: int = SamplingSettings.max_tokens  # room for the longest solver answer (~130 tokens)
    batch_size: int = 32  # sequences generated at once, across games and group members
    max_history: int = 4  # start states carry 0..max_history earlier turns (sft/states.py)
    off_policy: float = 0.5  # share of those turns played by a weaker stand-in, not the solver

    @property
    def sampling(self) -> SamplingSettings:
        return SamplingSettings(self.temperature, self.top_p, self.max_tokens)


@dataclass(frozen=True)
class Group:
    """The answers sampled at one position, with their rewards."""

    state: GameState
    secret: str
    prompt: list[int]
    completions: list[Completion]
    rewards: GroupRewards
    rejected: tuple[Rejection, ...] = ()  # answers refused at this turn, named in the prompt


@dataclass
class Rollout:
    groups: list[Group] = field(default_factory=list)
    games: list[GameRecord] = field(default_factory=list)

    def extend(self, other: "Rollout") -> None:
        self.groups.extend(other.groups)
        self.games.extend(other.games)

    def stats(self, temperature: float) -> dict[str, float | None]:
        """Reward mean/std and per component, win and invalid rates, over every answer
        (sampled at `temperature`, which the figures carry)."""
        if not self.groups:
            return {}
        total = np.concatenate([g.rewards.total for g in self.groups])
        parts = np.concatenate([g.rewards.components for g in self.groups])
        playable = np.concatenate([g.rewards.parsed.playable for g in self.groups])
        format_ok = np.concatenate([g.rewards.parsed.format_ok for g in self.groups])
        won = [g.state.won for g in self.games]
        stats = {"reward_mean": float(total.mean()), "reward_std": float(total.std()),
                 **{f"reward_{name}": float(parts[:, i].mean()) for i, name in enumerate(COMPONENTS)},
                 "invalid_rate": float(1.0 - playable.mean()), "format_rate": float(format_ok.mean()),
                 "temperature": temperature,
                 "games": len(self.games), "wins": int(sum(won)),
                 "win_rate": float(np.mean(won)) if won else None,
                 "answer_tokens": int(sum(len(c.tokens) for g in self.groups for c in g.completions))}
        return stats


def choose_member(rewards: GroupRewards, how: str, rng: np.random.Generator) -> int:
    if how == "best":
        return int(np.argmax(rewards.total))
    return int(rng.integers(len(rewards.total)))


def play(model, tokenizer, scorer: RewardScorer, starts: list[StartState],
         settings: RolloutSettings, rng: np.random.Generator) -> Rollout:
    """Play every start state to the end; returns each position's group and each game."""
    games = [GameRecord(s.secret, s.state) for s in starts]
    columns = scorer.setup.lists.secrets(scorer.setup.secret_kind)
    column_of = {w: i for i, w in enumerate(columns)}
    rollout = Rollout(games=games)
    active = [g for g in games if not g.over]
    while active:
        prompts = [prompt_tokens(tokenizer, g.state, g.rejected) for g in active]
        answers = sample(model, tokenizer, prompts, settings.group_size, settings.sampling, settings.batch_size)
        for game, prompt, completions in zip(active, prompts, answers):
            rewards = scorer.score([c.text for c in completions], game.state, game.secret)
            rollout.groups.append(Group(game.state, game.secret, prompt, completions, rewards, game.rejected))
            pick = choose_member(rewards, settings.choose, rng)
            _advance(game, rewards, pick, scorer, column_of[game.secret])
        active = [g for g in active if not g.over]
    return rollout


def _advance(game: GameRecord, rewards: GroupRewards, pick: int, scorer: RewardScorer, column: int) -> None:
    parsed = rewards.parsed
    if not parsed.playable[pick]:
        game.rejected += (Rejection(parsed.guesses[pick], parsed.failures[pick]),)
        return
    game.rejected = ()
    row = int(parsed.rows[pick])
    game.state = game.state.play(parsed.guesses[pick], int(scorer.setup.matrix[row, column]))
