"""Rollouts: whole games played by the model, a group of answers at every position.

Each game asks for `group_size` answers to its current position; all games and
all members share one running batch (the prompt's KV cache is prefilled once per
position and shared by its group), and a game moves on as soon as its own group
has answered. The kernel scores each group; one member is played — the best, or one drawn at random so later turns
stay on-policy — and the games advance. An unplayable answer costs a turn's chance
without being played (the next prompt names it); three in a row lose the game, as in eval.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from common.knobs import knob
from eval.harness import GameRecord
from llm.format import Rejection, prompt_tokens
from llm.generation import (MAX_TEMPERATURE, Completion, GroupStream, PassCounters, SamplingSettings,
                            shared_prefix_length)
from llm.histories import ENDGAME_CANDIDATES
from rl.reward import COMPONENTS, GroupRewards, RewardScorer
from sft.states import StartState
from solver.state import GameState

CHOICES = ("best", "sampled")
# start states: 0..max_history earlier turns, an endgame position, or one of the model's own games' endgame positions
STARTS = ("any", "endgame", "games")


@dataclass(frozen=True)
class RolloutSettings:
    group_size: int = knob(8, "Answers sampled per position (G).", range=(2, 256), flag="--group-size")
    games_per_round: int = knob(4, "Fresh games per rollout round (started each time more groups are wanted).",
                                range=(1, 4096), flag="--games")
    choose: str = knob("sampled", "Which member advances the game: the best, or one sampled (later turns stay "
                                  "on-policy).", choices=CHOICES)
    # eval's: training answers are the answers eval sees
    temperature: float = knob(SamplingSettings.temperature, "Sampling temperature of the answers.",
                              range=(0.0, MAX_TEMPERATURE), open_low=True, flag="--temperature")
    top_p: float = knob(1.0, "Nucleus sampling: the smallest set of tokens with this much probability.",
                        range=(0.0, 1.0), open_low=True)
    # room for the longest solver answer (~130 tokens)
    max_tokens: int = knob(SamplingSettings.max_tokens, "Longest answer sampled.", range=(8, 4096),
                           flag="--max-tokens")
    batch_size: int = knob(32, "Sequences generated at once, across games and group members.", range=(1, 4096),
                           flag="--batch-size")
    max_history: int = knob(4, "Start states carry 0..max_history earlier turns (sft/states.py).", range=(0, 5))
    off_policy: float = knob(0.5, "Share of those turns played by a weaker stand-in, not the solver.",
                             range=(0.0, 1.0))
    start: str = knob("any", "Start states: any (0-4 earlier turns), endgame (1-6 candidates left), or games "
                             "(the endgame positions of start_games).", choices=STARTS, flag="--start")
    start_games: str = knob("", "An eval --json games file on training secrets whose endgame positions, with the "
                                "refusals shown there, are the start states of start: games.", flag="--start-games")
    any_share: float = knob(0.0, "Share of each round's start states drawn as start: any draws them (0-max_history "
                                 "earlier turns) when start is endgame or games.", range=(0.0, 1.0), flag="--any-share")
    endgame_candidates: int = knob(ENDGAME_CANDIDATES, "Most candidates left at an endgame start (llm/histories.py).",
                                   range=(1, 50))
    turns: int = knob(0, "Groups asked per game: 0 plays to the end, 1 is single-turn.", range=(0, 6),
                      flag="--turns")

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
    expert_members: int = 0  # the last completions are an expert's answers, not sampled (rl/guidance.py)


@dataclass
class Rollout:
    groups: list[Group] = field(default_factory=list)
    games: list[GameRecord] = field(default_factory=list)
    passes: PassCounters = field(default_factory=PassCounters)  # the model passes behind the answers

    def extend(self, other: "Rollout") -> None:
        self.groups.extend(other.groups)
        self.games.extend(other.games)
        self.passes.add(other.passes)

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
    """Play every start state to the end; returns each position's group (game by game, in
    the order played) and each game.

    Games are independent streams in one running batch (llm/generation.py GroupStream):
    as soon as a position's whole group has answered, it is scored, the game advances
    and its next position joins the batch, while other games' answers are still being
    written. Which member advances a game is drawn in the order groups finish, which
    the seed fixes.
    """
    games = [GameRecord(s.secret, s.state, rejected=s.rejected) for s in starts]
    columns = scorer.setup.lists.secrets(scorer.setup.secret_kind)
    column_of = {w: i for i, w in enumerate(columns)}
    first = [prompt_tokens(tokenizer, g.state, g.rejected) for g in games]
    prefix = first[0][:shared_prefix_length(first)] if first else None
    stream = GroupStream(model, tokenizer, settings.sampling, settings.batch_size, prefix, join_size=settings.batch_size)
    asked: dict[int, tuple[int, list[int]]] = {}  # group id -> (game, prompt)
    played: list[tuple[int, int, Group]] = []  # (game, group id, group)
    groups_of = [0] * len(games)

    def ask(index: int, prompt: list[int]) -> None:
        asked[stream.submit(prompt, settings.group_size)] = (index, prompt)
        groups_of[index] += 1

    for index, (game, prompt) in enumerate(zip(games, first)):
        if not game.over:
            ask(index, prompt)
    while stream:
        for group_id, completions in stream.finished():
            index, prompt = asked.pop(group_id)
            game = games[index]
            rewards = scorer.score([c.text for c in completions], game.state, game.secret)
            played.append((index, group_id, Group(game.state, game.secret, prompt, completions, rewards,
                                                     game.rejected)))
            _advance(game, rewards, choose_member(rewards, settings.choose, rng), scorer, column_of[game.secret])
            if not game.over and (settings.turns == 0 or groups_of[index] < settings.turns):
                ask(index, prompt_tokens(tokenizer, game.state, game.rejected))
    stream.close()
    return Rollout(groups=[group for _, _, group in sorted(played, key=lambda p: p[:2])], games=games,
                   passes=stream.passes)


def _advance(game: GameRecord, rewards: GroupRewards, pick: int, scorer: RewardScorer, column: int) -> None:
    parsed = rewards.parsed
    if not parsed.playable[pick]:
        game.rejected += (Rejection(parsed.guesses[pick], parsed.failures[pick]),)
        return
    game.rejected = ()
    row = int(parsed.rows[pick])
    game.state = game.state.play(parsed.guesses[pick], int(scorer.setup.matrix[row, column]))
