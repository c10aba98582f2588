"""output-rl's three gains trained by a sampled policy gradient: the tuned layer writes its own answers.

Session 70 found that every gain setting the exact expected reward over frozen text chose lost in
play: the gains act at every whole-word token, so they rewrite the candidate lists the thought
writes before the word played, which a reward over the untuned model's text cannot see
(results/output-rl/). Here each step plays whole games on training secrets with the merged layer
of the current gains (sampled at the play temperature, no head), scores every answer with the one
reward kernel (thought truth included, so a list that stops fitting the clues costs), and takes
REINFORCE's gradient of the three gains over every token each answer wrote: the log-probability
of a token under the gains is exact from the frozen trunk's state (rl/output_rl.py `row_arrays`),
so the gradient sees the whole text, lists included. The baseline is the step's mean reward at the
same turn, advantages scaled by their spread; the anchor KL of output-rl keeps the leash.
Resumable: sampled_state.json after every step.

Session 71 read a 32-game gradient within one standard error of zero. `--group-size K` plays each
of games/K secrets K times, as GRPO groups whole games by prompt, and takes the baseline over the
same secret's games at the same turn, which removes how hard the secret is from the advantage.
Every step logs both baselines' gradients on its own games, each with its standard error over the
secrets (a secret's games are not independent), so one run says which estimator is readable.
Session 72 found the noise is within a secret's games, so `--positions-from` groups at a shared
position instead: each step draws games/K positions the model reached in those games files and
answers each K times (one turn, as GRPO's groups), the baseline the mean of the other K-1 answers
there (leave-one-out, so it takes no signal from the answer itself).

    python -m studies.sampled_gains --distilled runs/d9 --out runs/orl-sampled \
        --states runs/orl-every/states.npz --own-games G.json --own-validation V.json --steps 12
"""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import click

from common.errors import run_script
from llm.blas import ensure_fast_blas
from studies.output_rl_inputs import output_rl_inputs


@dataclass
class Answered:
    """One answer as the model wrote it: its prompt, its sampled tokens, the position and the game."""
    game: int
    prompt: list[int]
    tokens: tuple[int, ...]
    text: str
    state: object
    rejected: tuple


def recording_player(base):
    """A ModelPlayer that keeps every answer's prompt and sampled tokens (eval keeps only the text)."""
    from llm.format import Move, parse_answer, prompt_tokens

    class RecordingPlayer(base):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.answered: list[Answered] = []
            self._pending: dict[int, Answered] = {}

        def submit(self, game, state, rejected) -> None:
            super().submit(game, state, rejected)
            group = max(self._asked)
            self._pending[group] = Answered(game, prompt_tokens(self.tokenizer, state, rejected), (), "", state,
                                            rejected)

        def finished(self):
            moves = []
            while self._asked:
                for group, (completion,) in self._stream.finished():
                    game, state = self._asked.pop(group)
                    record = self._pending.pop(group)
                    record.tokens, record.text = tuple(completion.tokens), completion.text
                    self.answered.append(record)
                    parsed = parse_answer(completion.text, state.lists, state.guesses)
                    moves.append((game, Move(parsed.guess, completion.text, parsed.failure)))
            return moves

    return RecordingPlayer


def trunk_states(model, answered: list[Answered]):
    """(tokens, hidden) the final normed state before each answer token, and the tokens, in order.

    The opening every prompt shares (system message, rules) is run once; each answer's rest runs
    from a copy of its cache, one answer a core at a time (as eval's prefill: llm/generation.py)."""
    import mlx.core as mx
    import numpy as np
    from mlx_lm.models.cache import make_prompt_cache

    from llm.cpu_streams import core_streams
    from llm.generation import _common_length, first_positions

    sequences = [a.prompt + list(a.tokens) for a in answered]
    shared = min(_common_length(sequences[0], s, len(a.prompt) - 1) for s, a in zip(sequences, answered))
    opening = make_prompt_cache(model)
    model.model(mx.array(sequences[0][:shared])[None], cache=opening)
    mx.eval([c.state for c in opening])
    states: list = [None] * len(answered)
    with core_streams() as streams:
        for first in range(0, len(answered), len(streams)):
            wave = []
            for stream, i in zip(streams, range(first, min(first + len(streams), len(answered)))):
                with mx.stream(stream):
                    cache = [first_positions(layer, shared) for layer in opening]
                    hidden = model.model(mx.array(sequences[i][shared:])[None], cache=cache)[0]
                    begin = len(answered[i].prompt) - 1 - shared
                    wave.append((i, hidden[begin:begin + len(answered[i].tokens)].astype(mx.float32)))
            mx.eval([h for _, h in wave])
            for i, h in wave:
                states[i] = np.array(h)
    return np.concatenate(states), np.concatenate([np.array(a.tokens, np.int64) for a in answered])


def turn_baselines(rewards, turns, keys):
    """Each answer's baseline: the mean reward of the answers with its key at its turn."""
    import numpy as np

    table: dict[tuple[int, int], list[float]] = {}
    for reward, turn, key in zip(rewards, turns, keys):
        table.setdefault((int(key), int(turn)), []).append(float(reward))
    return np.array([np.mean(table[int(key), int(turn)]) for turn, key in zip(turns, keys)])


def cluster_gradient(slopes, advantage_rows, row_clusters, clusters: int, answers: int) -> tuple[list, list]:
    """REINFORCE's gradient (policy part) and its standard error, from each row's slope of its
    log-probability: the sum of the clusters' shares, and sqrt(clusters) times their spread."""
    import numpy as np

    per_row = -(advantage_rows[:, None] * slopes) / answers
    shares = np.zeros((clusters, slopes.shape[1]))
    np.add.at(shares, row_clusters, per_row)
    return (np.round(shares.sum(axis=0), 6).tolist(),
            np.round(np.sqrt(clusters) * shares.std(axis=0, ddof=1), 6).tolist())


@click.command()
@output_rl_inputs
@click.option("--steps", default=12, show_default=True, type=click.IntRange(1))
@click.option("--games", default=32, show_default=True, type=click.IntRange(2), help="Training games a step.")
@click.option("--group-size", default=1, show_default=True, type=click.IntRange(1),
              help="Games a secret is played each step; the baseline is its group's mean at each turn.")
@click.option("--positions-from", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="eval JSON of the model's own games on training secrets: answer their positions, --group-size "
                   "times each, instead of playing games (--games is then the answers a step).")
@click.option("--split", default="untaught", show_default=True, help="Which secrets the games draw.")
@click.option("--lr", default=0.1, show_default=True, type=click.FloatRange(0, min_open=True))
@click.option("--kl-coef", default=1.0, show_default=True, type=click.FloatRange(0))
@click.option("--seed", default=0, show_default=True, type=int)
def main(distilled: str, out: str, states: str | None, own_games: tuple[str, ...], own_validation: tuple[str, ...],
         steps: int, games: int, group_size: int, positions_from: tuple[str, ...], split: str, lr: float,
         kl_coef: float, seed: int) -> None:
    ensure_fast_blas()
    import mlx.core as mx
    import mlx.optimizers as optim
    import numpy as np

    import rl.output_rl as output_rl
    from common.errors import UserError
    from common.fileio import append_line, atomic_replace_dir, atomic_write_json, read_json
    from eval.endgame import answered_positions
    from eval.harness import play_games
    from eval.splits import SPLITS, sample_secrets
    from llm.format import parse_answer
    from llm.generation import SamplingSettings
    from llm.loading import load_model
    from llm.player import ModelPlayer
    from llm.spelled_output import write_output_layer
    from rl.reward import RewardScorer
    from solver.setup import load_setup

    folder = Path(out)
    if split not in SPLITS:
        raise UserError(f"--split {split}: one of {', '.join(SPLITS)}")
    if games % group_size or games // group_size < 2:
        raise UserError(f"--games {games} is not two or more groups of --group-size {group_size}")
    if positions_from and group_size < 2:
        raise UserError("--positions-from needs --group-size 2 or more: the baseline is the other answers there")
    if states and not (folder / output_rl.STATES_FILE).exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(states, folder / output_rl.STATES_FILE)
    settings = output_rl.OutputRLSettings(seed=seed)
    source = output_rl.Source.of(distilled)
    prepared = output_rl.prepare(source, folder, own_games, own_validation, settings, show_progress=False)
    layers, secret_mask, temperature = prepared.layers, prepared.secret_mask, settings.temperature
    model, tokenizer = load_model(str(source.folder / "model"), None, "float32")
    setup = load_setup("answers")
    scorer = RewardScorer(setup)
    pool = SPLITS[split](setup.lists.answers)
    reached = [position for path in positions_from
               for position, _ in answered_positions(setup, read_json(path, "an eval JSON of the model's games"))]
    if positions_from and any(position.secret not in pool for position in reached):
        raise UserError(f"--positions-from holds games whose secret is not in --split {split}")

    state_file, metrics = folder / "sampled_state.json", folder / "sampled_metrics.jsonl"
    gains = output_rl.initial_gains()
    optimizer = optim.Adam(learning_rate=lr, bias_correction=True)
    done = 0
    if state_file.exists():
        saved = read_json(state_file, "the sampled run's state")
        gains = {k: mx.array(v) for k, v in saved["gains"].items()}
        optimizer.init(gains)
        optimizer.state = {"step": mx.array(saved["adam_step"], mx.uint64),
                           "learning_rate": mx.array(lr),
                           **{k: {"m": mx.array(m), "v": mx.array(v)} for k, (m, v) in saved["adam"].items()}}
        done = saved["step"]
    frozen = output_rl.readings(gains, prepared.splits, secret_mask, temperature)
    if done == 0:
        metrics.unlink(missing_ok=True)
        append_line(metrics, json.dumps({"step": 0, **{k: float(v) for k, v in gains.items()}, "frozen": frozen}))

    def token_log_probs(params, rows):
        """Each written token's log-probability under the gains."""
        return output_rl.row_log_probs(params, rows["own"], rows["spelled"], rows["along"], rows["rest_lse"],
                                       rows["target"], rows["word"], secret_mask, temperature)[2]

    def policy_loss(params, rows, advantage_rows, answers):
        """REINFORCE's loss: minus the advantage-weighted log-probability of every token written."""
        return -(mx.array(advantage_rows) * token_log_probs(params, rows)).sum() / answers

    def objective(params, rows, advantage_rows, answers):
        return (policy_loss(params, rows, advantage_rows, answers)
                + kl_coef * output_rl.anchor_kl(params, prepared.anchors, secret_mask, temperature))

    grad_fn = mx.value_and_grad(objective)
    index = {int(t): i for i, t in enumerate(layers.words)}
    for step in range(done + 1, steps + 1):
        began = time.perf_counter()
        model.lm_head.weight = layers.merged(gains).astype(model.lm_head.weight.dtype)
        player = recording_player(ModelPlayer)(model, tokenizer, "sampled gains", SamplingSettings(temperature),
                                               seed * 100_003 + step, 32)
        if positions_from:
            records = []
            chosen = random.Random(seed * 100_003 + step).sample(reached, games // group_size)
            for number in range(games):
                position = chosen[number // group_size]
                player.submit(number, position.state, position.rejected)
            player.finished()
            secrets = [chosen[number // group_size].secret for number in range(games)]
        else:
            drawn = sample_secrets(pool, games // group_size, seed * 100_003 + step)
            secrets = [secret for secret in drawn for _ in range(group_size)]
            records = play_games(player, setup, secrets, measure_moves=False, show_progress=False)
        played = time.perf_counter()
        answered = player.answered
        rewards = np.array([float(scorer.score([a.text], a.state, secrets[a.game]).total[0]) for a in answered])
        turns = np.array([len(a.state.turns) for a in answered])
        clusters = np.array([a.game // group_size for a in answered])
        spread = max(float(rewards.std()), 1e-6)
        advantages = {"turn": (rewards - turn_baselines(rewards, turns, np.zeros_like(turns))) / spread}
        if positions_from:
            group_sums = np.bincount(clusters, weights=rewards)
            advantages["position_loo"] = (rewards - (group_sums[clusters] - rewards) / (group_size - 1)) / spread
        else:
            advantages["secret_turn"] = (rewards - turn_baselines(rewards, turns, clusters)) / spread
        used = "turn" if group_size == 1 else "position_loo" if positions_from else "secret_turn"
        advantage = advantages[used]
        hidden, tokens = trunk_states(model, answered)
        forwarded = time.perf_counter()
        own, spelled, along, rest_lse, _, target = output_rl.row_arrays(hidden, tokens, layers, temperature)
        rows = {"own": own, "spelled": spelled, "along": along, "rest_lse": rest_lse, "target": target,
                "word": np.array([index.get(int(t), -1) for t in tokens], np.int64)}
        lengths = [len(a.tokens) for a in answered]
        advantage_rows = np.repeat(advantage, lengths).astype(np.float32)
        loss, grads = grad_fn(gains, rows, advantage_rows, len(answered))
        # each row's slope of its log-probability in each gain (forward mode), so both baselines'
        # policy gradients and their spread over the secrets come from one pass
        def row_log_p(*values):
            return token_log_probs(dict(zip(output_rl.GAINS, values)), rows)

        slopes = np.stack([np.array(mx.jvp(row_log_p, [gains[k] for k in output_rl.GAINS],
                                           [mx.array(float(k == gain)) for k in output_rl.GAINS])[1][0])
                           for gain in output_rl.GAINS], axis=1)
        row_clusters = np.repeat(clusters, lengths)
        estimators = {name: cluster_gradient(slopes, np.repeat(value, lengths), row_clusters,
                                             games // group_size, len(answered))
                      for name, value in advantages.items()}
        gains = optimizer.apply_gradients(grads, gains)
        mx.eval(gains, optimizer.state)
        if not all(np.isfinite(float(v)) for v in gains.values()):
            raise UserError(f"step {step}: a gain is not finite (lower --lr)")
        frozen = output_rl.readings(gains, prepared.splits, secret_mask, temperature)
        point = {"step": step, **{k: round(float(v), 5) for k, v in gains.items()},
                 "grad": {k: round(float(v), 6) for k, v in grads.items()},
                 "group_size": group_size,
                 "policy_grad": dict(zip(output_rl.GAINS, estimators[used][0])),
                 "policy_grad_se": dict(zip(output_rl.GAINS, estimators[used][1])),
                 "baselines": {name: {"grad": dict(zip(output_rl.GAINS, grad)), "se": dict(zip(output_rl.GAINS, se))}
                               for name, (grad, se) in estimators.items()},
                 "wins": (sum(r.state.won for r in records) if records else
                          sum(parse_answer(a.text, a.state.lists, a.state.guesses).guess == secrets[a.game]
                              for a in answered)),
                 "games": len(records), "answers": len(answered),
                 "mean_reward": round(float(rewards.mean()), 4),
                 "reward_std": round(float(rewards.std()), 4), "rows": len(tokens),
                 "text_not_tokens": sum(tokenizer.decode(list(a.tokens)) != a.text for a in answered),
                 "loss": round(float(loss), 5),
                 "anchor_kl": round(float(output_rl.anchor_kl(gains, prepared.anchors, secret_mask, temperature)), 6),
                 "frozen": frozen, "play_seconds": round(played - began, 1),
                 "forward_seconds": round(forwarded - played, 1),
                 "step_seconds": round(time.perf_counter() - began, 1)}
        append_line(metrics, json.dumps(point))
        atomic_write_json(folder / "games" / f"step-{step:03d}.json",
                          {"step": step, "secrets": secrets, "gains": {k: point[k] for k in output_rl.GAINS},
                           "per_game": [r.to_json() for r in records],
                           "answers": [{"game": a.game, "turn": len(a.state.turns) + 1, "reward": float(r),
                                        "advantage": float(v)} for a, r, v in zip(answered, rewards, advantage)]})
        adam = {k: (float(optimizer.state[k]["m"]), float(optimizer.state[k]["v"])) for k in gains}
        atomic_write_json(state_file, {"step": step, "gains": {k: float(v) for k, v in gains.items()},
                                       "adam_step": int(optimizer.state["step"]), "adam": adam})
        click.echo(f"step {step}: wins {point['wins']}/{games}, reward {point['mean_reward']}, beta {point['beta']}, "
                   f"alpha {point['alpha']}, bias {point['bias']} ({point['step_seconds']} s)", err=True)

    final = {k: mx.array(float(v)) for k, v in gains.items()}

    def build(tmp: Path) -> None:
        shutil.copytree(source.folder / "model", tmp, dirs_exist_ok=True)
        write_output_layer(tmp, layers.merged(final))

    atomic_replace_dir(folder / "model", build)
    click.echo(f"wrote {folder / 'model'}: beta {float(final['beta']):.4f}, alpha {float(final['alpha']):.4f}, "
               f"bias {float(final['bias']):.4f}")


if __name__ == "__main__":
    run_script(main)
