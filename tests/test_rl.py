"""RL on the tiny model: advantage maths, group dropping, GRPO and expert-iteration updates,
the reference policy, NaN guards, the schedule and config checks, and whole runs that
resume exactly after a kill -9 in the middle of a checkpoint save.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)
from mlx.utils import tree_flatten, tree_map

from cli import cli
from eval.splits import is_held_out
from llm.adapter_files import save_adapter
from llm.format import format_answer, parse_answer, prompt_tokens, render_state
from llm.generation import Completion
from llm.loading import load_model
from rl.config import RLConfig, build_config, load_config_file
from rl.expert_iteration import EISettings, ExpertIteration, passing_answers, truthful_target
from rl.grpo import (KL_LOG_RATIO_CLAMP, KL_TOKEN_CLAMP, GrpoLearner, GrpoSettings, adapter_disabled,
                     advantages, answer_logprobs, answer_tokens, chunk_graphs, collect_groups, group_batches,
                     informative_groups, length_chunks, prompt_kv)
from common.errors import UserError
from rl.guidance import ExpertGuide, guidance_figures
from rl.lora_loop import TIMING_FIGURES, PhaseOptimizers, run_grpo_step
from rl.loop import run_rl
from rl.run_files import RunRequest
from rl.policy import load_policy
from rl.report import LiveView, curves, sparkline
from rl.reward import RewardScorer
from rl.rollout import Group, Rollout, RolloutSettings, play
from rl.schedule import parse_schedule
from sft.checkpoint import latest_checkpoint, load_checkpoint
from sft.cot import check_thought, expert_answer, truthful_answer
from sft.lora import AdapterSettings, attach_adapter, trainable_weights
from sft.states import StartState, frequent_positions, sample_start_states
from solver.feedback import feedback
from solver.policy import expert_policy
from solver.setup import load_setup

REPO = Path(__file__).resolve().parent.parent
# A run small enough for the tiny model on 2 cores: EI first, so the GRPO rollouts that
# follow depend on weights a resume must have restored; held-out evals at steps 0, 2 and 3.
TINY_RUN = {
    "steps": 3, "schedule": "ei:1,grpo:1", "checkpoint_every": 1, "seed": 3, "eval_every": 2, "eval_games": 3,
    "rollout": {"group_size": 2, "games_per_round": 1, "max_tokens": 10, "batch_size": 8, "max_history": 2},
    "grpo": {"groups_per_step": 1, "max_rollouts": 2, "micro_batch_tokens": 20},
    "ei": {"states_per_step": 2, "samples": 2, "sft_steps": 1, "batch_size": 2, "learning_rate": 1e-3},
    "lora": {"rank": 2},
}


def run_cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def setup():
    return load_setup("answers")


@pytest.fixture(scope="module")
def scorer(setup):
    return RewardScorer(setup)


@pytest.fixture
def lora_model(tiny_model_dir):  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    mx.random.seed(0)
    attach_adapter(model, AdapterSettings(rank=4))
    # LoRA's B starts at zero; nudge it so the adapter changes the outputs from the start.
    model.update(tree_map(lambda p: p + 0.005, model.trainable_parameters()))
    return model, tokenizer


def hand_made_group(tokenizer, scorer, setup, texts: list[str], secret: str = "bunny") -> Group:
    """A group as a rollout would make it, from answers written by hand (real tokens, real rewards)."""
    state = setup.start.play("salet", feedback("salet", secret))
    completions = [Completion(t, tuple(tokenizer.encode(t, add_special_tokens=False)), "stop") for t in texts]
    return Group(state, secret, prompt_tokens(tokenizer, state), completions, scorer.score(texts, state, secret))


GOOD, BAD = format_answer("fits", "bunny"), "<guess>zzzzz</guess> oops"
MIXED = [GOOD, BAD, format_answer("x", "qqqqq"), format_answer("hmm", "corny")]


def weights_of(model) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in trainable_weights(model).items()}


# ---- advantages and group dropping -------------------------------------------------------

def test_advantages_on_hand_made_groups():
    (plain,) = advantages([np.array([1.0, 2.0, 3.0])], "none")
    np.testing.assert_allclose(plain, [-1, 0, 1])
    np.testing.assert_allclose(advantages([np.array([1.0, 2.0, 3.0])], "group")[0],
                               np.array([-1, 0, 1]) / (math.sqrt(2 / 3) + 1e-6))
    np.testing.assert_allclose(advantages([np.array([0.0, 0.0, 4.0, 0.0])], "none")[0], [-1, -1, 3, -1])
    assert not advantages([np.array([2.5, 2.5])], "group")[0].any()  # a tie: nothing to learn
    # An expert's answer (the last member) is measured against the samples' mean, not its own.
    np.testing.assert_allclose(advantages([np.array([1.0, 3.0, 10.0])], "none", sampled=[2])[0], [-1, 1, 8])
    # The example: a 0.001 difference weighs like a win under the group's own std,
    # and stays a thousandth of the batch's spread under the batch std.
    tiny, big = np.array([1.5, 1.501, 1.5, 1.5]), np.array([0.0, 3.0, 0.0, 0.0])
    assert advantages([tiny], "group")[0].max() == pytest.approx(advantages([big], "group")[0].max(), rel=1e-2)
    small, large = advantages([tiny, big], "batch")
    assert large.max() > 1.0 and small.max() < 1e-3 * large.max()
    centred = np.concatenate([tiny - tiny.mean(), big - big.mean()])
    np.testing.assert_allclose(np.concatenate([small, large]), centred / (centred.std() + 1e-6))


def test_tied_groups_are_dropped_and_replaced(tiny_model_dir, setup, scorer):  # noqa: F811
    _, tokenizer = load_model(str(tiny_model_dir))
    tied = hand_made_group(tokenizer, scorer, setup, ["junk", "more junk"])
    signal = hand_made_group(tokenizer, scorer, setup, [GOOD, BAD])
    rounds = iter([Rollout([tied, tied]), Rollout([tied, signal]), Rollout([signal])])
    rollout, kept = collect_groups(lambda: next(rounds), wanted=1, max_rounds=5, tie_threshold=0.05)
    assert kept == [signal] and len(rollout.groups) == 4  # stopped after the round that filled the batch
    told = []
    rollout, kept = collect_groups(lambda: Rollout([tied]), wanted=2, max_rounds=3, tie_threshold=0.05,
                                   on_round=lambda done, found: told.append((done, found)))
    assert kept == [] and len(rollout.groups) == 3  # bounded attempts, then give up
    assert told == [(0, 0), (1, 0), (2, 0)]  # the progress display hears of every round before it runs


def test_wins_only_keeps_the_groups_in_which_a_sampled_answer_wins(tiny_model_dir, setup, scorer):  # noqa: F811
    _, tokenizer = load_model(str(tiny_model_dir))
    won = hand_made_group(tokenizer, scorer, setup, [GOOD, BAD])
    no_win = hand_made_group(tokenizer, scorer, setup, [format_answer("hmm", "corny"), BAD])
    expert_won = dataclasses.replace(hand_made_group(tokenizer, scorer, setup, [BAD, GOOD]), expert_members=1)
    assert not no_win.rewards.tied(0.05)  # playable over unplayable: a spread, but no win
    assert informative_groups([won, no_win, expert_won], 0.05) == [won, no_win, expert_won]
    assert informative_groups([won, no_win, expert_won], 0.05, wins_only=True) == [won]
    rounds = iter([Rollout([no_win]), Rollout([no_win, won])])
    rollout, kept = collect_groups(lambda: next(rounds), wanted=1, max_rounds=3, tie_threshold=0.05, wins_only=True)
    assert kept == [won] and len(rollout.groups) == 3


def test_the_experts_answer_gives_a_group_of_failures_a_signal(tiny_model_dir, setup, scorer):  # noqa: F811
    _, tokenizer = load_model(str(tiny_model_dir))
    expert = expert_policy(setup.solver(), "candidates")
    guide = ExpertGuide(expert, tokenizer, scorer)
    tied = hand_made_group(tokenizer, scorer, setup, ["junk", "more junk"])
    guided = guide(tied)
    text = expert_answer(expert, tied.state)
    assert [c.text for c in guided.completions] == ["junk", "more junk", text]
    assert tokenizer.decode(list(guided.completions[-1].tokens)) == text  # the tokens the update trains
    assert guided.state is tied.state and guided.prompt == tied.prompt
    np.testing.assert_allclose(guided.rewards.total[:2], tied.rewards.total)  # the samples score as before
    assert guided.rewards.total[2] > guided.rewards.total[0] + 2.0  # consistent, possible, informative, true
    rollout, kept = collect_groups(lambda: Rollout([tied]), wanted=1, max_rounds=1, tie_threshold=0.05, guide=guide)
    assert rollout.groups == [tied] and len(kept) == 1 and kept[0].completions[-1].text == text
    assert kept[0].expert_members == 1
    (adv,) = advantages([kept[0].rewards.total], "batch", sampled=[2])
    assert adv[2] > 0 and adv[0] == adv[1] == 0  # the expert's answer is pushed up; tied failures are left alone
    figures = guidance_figures(kept)
    assert figures["expert_top_share"] == 1.0 and figures["sample_matched_expert_share"] == 0.0
    assert figures["expert_reward_mean"] == pytest.approx(guided.rewards.total[2])


def test_a_guided_grpo_step_trains_the_experts_answer_and_logs_it(lora_model, setup, scorer):
    model, tokenizer = lora_model
    config = build_config({"rollout": {"group_size": 2, "games_per_round": 1, "max_tokens": 8, "max_history": 1},
                           "grpo": {"groups_per_step": 1, "max_rollouts": 1, "micro_batch_tokens": 64,
                                    "expert_in_group": True},
                           "ei": {"expert": "candidates"}})
    learner = GrpoLearner(model, config.grpo, config.rollout.temperature, tokenizer.eos_token_id)
    guide = ExpertGuide(expert_policy(setup.solver(), "candidates"), tokenizer, scorer)
    rng = np.random.default_rng(4)
    record = run_grpo_step(model, tokenizer, scorer, learner, config,
                           lambda: sample_start_states(setup, setup.solver(), ["bunny"], 1, rng, 1), rng,
                           guide=guide)
    # The tiny model's 8-token answers never play: every group is a tie but for the expert's answer.
    assert record["informative_groups"] == record["groups"] > 0 and record["expert_top_share"] == 1.0
    assert record["invalid_rate"] == 1.0  # the rollout's figures are the model's own answers
    assert record["trained_tokens"] > record["answer_tokens"] + 20  # the expert's answers were trained on
    assert record["grad_norm"] > 0 and record["nonfinite_skipped"] == 0


def test_live_view_says_what_the_running_step_does():
    view = LiveView(total=4, done=1, show=False)
    view.begin(2, "grpo")
    view.status("rollout round 1, 0/4 groups")
    assert view.progress.tasks[0].description == "rl step 2 grpo: rollout round 1, 0/4 groups"
    view.update({"step": 2, "phase": "grpo"})
    assert view.progress.tasks[0].completed == 2


# ---- GRPO ---------------------------------------------------------------------------------

def test_shared_prompt_gradient_equals_whole_sequence_gradient(lora_model, setup, scorer):
    model, tokenizer = lora_model
    group = hand_made_group(tokenizer, scorer, setup, MIXED)
    settings = GrpoSettings(kl_coef=0.0, micro_batch_tokens=3)
    learner = GrpoLearner(model, settings, 0.7, tokenizer.eos_token_id)
    batch = group_batches([group], advantages([group.rewards.total], "group"), tokenizer.eos_token_id, 3)[0]
    n = int(sum(c.mask.sum().item() for c in batch.chunks))
    prompt_len = batch.prompt.shape[0]

    def whole(m):
        total = 0.0
        for chunk in batch.chunks:
            rows = chunk.answers.shape[0]
            tokens = mx.concatenate([mx.broadcast_to(batch.prompt[None], (rows, prompt_len)), chunk.answers], axis=1)
            logp = -nn.losses.cross_entropy(m(tokens[:, :-1])[:, prompt_len - 1:] / 0.7, chunk.answers)
            total = total - (logp * chunk.advantages[:, None] * chunk.mask).sum() / n
        return total

    _, expected = nn.value_and_grad(model, whole)(model)
    params, kv = model.trainable_parameters(), prompt_kv(model, batch.prompt)
    grads, kv_grad = None, None
    for chunk in batch.chunks:
        _, (g, gk) = learner._chunk_grad(params, kv, model, batch.prompt, [chunk], [None], [None], settings, 0.7, n)
        grads = g if grads is None else tree_map(mx.add, grads, g)
        kv_grad = gk if kv_grad is None else tree_map(mx.add, kv_grad, gk)
    grads = tree_map(mx.add, grads, learner._prompt_grad(params, model, batch.prompt, kv_grad))
    got, want = dict(tree_flatten(grads)), dict(tree_flatten(expected))
    scale = max(float(mx.abs(v).max()) for v in want.values())
    assert scale > 0
    assert max(float(mx.abs(got[k] - want[k]).max()) for k in want) < 1e-4 * scale


def plain_grpo_loss(model, groups, settings: GrpoSettings, temperature: float, eos: int):
    """The GRPO loss of one update written out plainly: every answer after its whole prompt,
    one row at a time, the reference a second full pass with the adapter off, old = current."""
    scaled = advantages([g.rewards.total for g in groups], settings.advantage_scale)
    rows = [(g.prompt, answer_tokens(c, eos), float(a)) for g, adv in zip(groups, scaled)
            for c, a in zip(g.completions, adv)]
    n_tokens = sum(len(answer) for _, answer, _ in rows)

    def logprobs(m, prompt, answer):
        tokens = mx.array(prompt + answer)[None]
        return -nn.losses.cross_entropy(m(tokens[:, :-1])[0, len(prompt) - 1:] / temperature, mx.array(answer))

    with adapter_disabled(model):
        refs = [mx.stop_gradient(logprobs(model, p, a)) for p, a, _ in rows]

    def loss(m):
        total = 0.0
        for (prompt, answer, adv), ref in zip(rows, refs):
            logp = logprobs(m, prompt, answer)
            ratio = mx.exp(logp - mx.stop_gradient(logp))
            delta = mx.clip(ref - logp, -KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
            kl = mx.minimum(mx.exp(delta) - delta - 1.0, KL_TOKEN_CLAMP)
            total = total + (-ratio * adv + settings.kl_coef * kl).sum() / n_tokens
        return total

    return nn.value_and_grad(model, loss)(model), n_tokens


@pytest.mark.parametrize("micro_batch_tokens", [10_000, 12])  # a group in one graph; answers in micro-batches
def test_update_gradient_equals_the_plain_computation(lora_model, setup, scorer, micro_batch_tokens):
    model, tokenizer = lora_model
    long_answer = format_answer("it fits every clue so far " * 20, "bunny")
    groups = [hand_made_group(tokenizer, scorer, setup, MIXED),
              hand_made_group(tokenizer, scorer, setup, [BAD, GOOD, GOOD], secret="crane"),
              hand_made_group(tokenizer, scorer, setup, [long_answer, BAD, GOOD])]  # cut by length
    settings = GrpoSettings(kl_coef=0.5, micro_batch_tokens=micro_batch_tokens)
    learner = GrpoLearner(model, settings, 0.7, tokenizer.eos_token_id)
    # Nudge the adapter off the reference so the KL term has a gradient too.
    model.update(tree_map(lambda p: p * 3.0, model.trainable_parameters()))
    (want_loss, want), n_tokens = plain_grpo_loss(model, groups, settings, 0.7, tokenizer.eos_token_id)
    batches = learner.batches(groups)
    assert all((len(chunk_graphs(gb.chunks, micro_batch_tokens)) == 1) == (micro_batch_tokens > 100)
               for gb in batches)
    if micro_batch_tokens > 100:  # one graph of two micro-batches: the long answer, the short two
        assert len(batches[2].chunks) == 2
    grads, sums = learner.gradients(batches, learner.reference_logprobs(batches), {}, n_tokens)
    assert sums["loss"] == pytest.approx(want_loss.item(), abs=1e-5)
    assert sums["kl"] > 0
    got, want = dict(tree_flatten(grads)), dict(tree_flatten(want))
    scale = max(float(mx.abs(v).max()) for v in want.values())
    assert max(float(mx.abs(got[k] - want[k]).max()) for k in want) < 1e-5 * scale


def test_reference_logprobs_run_the_vector_exp_and_equal_mlx_own(lora_model, setup, scorer):
    """The reference pass (no backward) runs llm/vector_exp.py's attention and SwiGLU on a CPU: its
    log-probs are the adapter-free model's through mlx's own functions, to float32 rounding, and the
    model's files point at mlx-lm's functions again afterwards."""
    from mlx_lm.models import base, llama

    model, tokenizer = lora_model
    model.update(tree_map(lambda p: p * 3.0, model.trainable_parameters()))  # policy != reference
    learner = GrpoLearner(model, GrpoSettings(kl_coef=0.5, micro_batch_tokens=12), 0.7, tokenizer.eos_token_id)
    batches = learner.batches([hand_made_group(tokenizer, scorer, setup, MIXED)])
    assert len(batches[0].chunks) > 1
    refs = learner.reference_logprobs(batches)
    assert llama.scaled_dot_product_attention is base.scaled_dot_product_attention
    gb = batches[0]
    with adapter_disabled(model):
        kv = prompt_kv(model, gb.prompt)
        want = [answer_logprobs(model, kv, gb.prompt, c.answers, 0.7) for c in gb.chunks]
    for got, expected in zip(refs[0], want):
        assert np.allclose(np.array(got), np.array(expected), atol=1e-5, rtol=1e-5)
    policy = answer_logprobs(model, prompt_kv(model, gb.prompt), gb.prompt, gb.chunks[0].answers, 0.7)
    assert not np.allclose(np.array(refs[0][0]), np.array(policy))  # the adapter is back on


def test_micro_batches_are_sized_by_tokens_and_kl_free_updates_skip_the_reference(lora_model, setup, scorer):
    assert length_chunks([5, 30, 10, 9, 2], 40) == [[1], [2, 3, 0, 4]]  # longest first, rows x longest <= 40
    assert length_chunks([50, 3], 10) == [[0], [1]]  # an answer longer than the budget goes alone
    # Cut where the padding saved (64 - 12 on each of two rows) beats one more pass (64 positions).
    assert length_chunks([64, 64, 12, 10], 640) == [[0, 1], [2, 3]]
    assert length_chunks([64, 64, 60, 60], 640) == [[0, 1, 2, 3]]  # 8 padded positions: not worth a pass
    assert length_chunks([64, 64, 12, 10], 640, pass_positions=200) == [[0, 1, 2, 3]]
    model, tokenizer = lora_model
    learner = GrpoLearner(model, GrpoSettings(kl_coef=0.0), 1.0, tokenizer.eos_token_id)
    passes = []
    learner.reference_logprobs = lambda batches: passes.append(batches)
    group = hand_made_group(tokenizer, scorer, setup, MIXED)
    figures = learner.update([group])
    lengths = [len(answer_tokens(c, tokenizer.eos_token_id)) for c in group.completions]
    assert passes == [] and figures["trained_tokens"] == sum(lengths)
    assert figures["padding_share"] == pytest.approx(1 - sum(lengths) / (4 * max(lengths)))


def test_grpo_updates_change_the_adapter_towards_the_better_answer(lora_model, setup, scorer):
    model, tokenizer = lora_model
    group = hand_made_group(tokenizer, scorer, setup, MIXED)
    assert group.rewards.total[0] > group.rewards.total[3] > group.rewards.total[2] == group.rewards.total[1]
    learner = GrpoLearner(model, GrpoSettings(learning_rate=1e-3, kl_coef=0.0, micro_batch_tokens=2), 1.0,
                          tokenizer.eos_token_id)
    prompt = mx.array(group.prompt)
    ends = [answer_tokens(c, tokenizer.eos_token_id) for c in group.completions[:2]]  # the best and the worst

    def logprob_gap() -> float:
        kv = prompt_kv(model, prompt)
        best, worst = (answer_logprobs(model, kv, prompt, mx.array([a]), 1.0).sum().item() for a in ends)
        return best - worst

    before, gap_before = weights_of(model), logprob_gap()
    figures = [learner.update([group]) for _ in range(3)]
    after = weights_of(model)
    assert all(math.isfinite(f["loss"]) and f["nonfinite_skipped"] == 0 for f in figures)
    assert any(not np.array_equal(before[k], after[k]) for k in before)
    assert logprob_gap() > gap_before + 20.0
    with_kl = GrpoLearner(model, GrpoSettings(learning_rate=1e-3, kl_coef=0.1), 1.0, tokenizer.eos_token_id)
    figures = with_kl.update([group])
    assert figures["kl"] > 0 and math.isfinite(figures["loss"])  # the adapter has moved off the reference


def test_second_update_on_a_batch_is_clipped(lora_model, setup, scorer):
    model, tokenizer = lora_model
    group = hand_made_group(tokenizer, scorer, setup, MIXED)
    learner = GrpoLearner(model, GrpoSettings(learning_rate=5e-2, kl_coef=0.0, clip_epsilon=0.1,
                                              updates_per_batch=2), 1.0, tokenizer.eos_token_id)
    figures = learner.update([group])
    assert figures["clip_fraction"] > 0  # the second pass saw ratios outside 1 +- 0.1


def test_reference_policy_is_the_model_without_its_adapter(lora_model, tiny_model_dir):  # noqa: F811
    model, _ = lora_model
    base, _ = load_model(str(tiny_model_dir))
    tokens = mx.array([[1, 40, 50, 60, 70, 80]])
    with adapter_disabled(model):
        np.testing.assert_allclose(np.array(model(tokens)), np.array(base(tokens)), atol=1e-5)
    assert not np.allclose(np.array(model(tokens)), np.array(base(tokens)), atol=1e-3)  # scale restored


def test_start_adapter_is_the_reference_and_the_export_is_one_adapter(start_adapter, tiny_model_dir):  # noqa: F811
    sft_model, _ = load_model(str(tiny_model_dir), start_adapter)
    mx.random.seed(0)
    policy = load_policy(str(tiny_model_dir), start_adapter, AdapterSettings(rank=2, scale=20.0))
    policy.model.update(tree_map(lambda p: p + 0.01, policy.model.trainable_parameters()))  # "trained"
    tokens = mx.array([[1, 40, 50, 60, 70, 80, 90]])
    with adapter_disabled(policy.model):  # the reference: the SFT model, not the base model
        np.testing.assert_allclose(np.array(policy.model(tokens)), np.array(sft_model(tokens)), atol=1e-4)
    trained = np.array(policy.model(tokens))
    assert not np.allclose(trained, np.array(sft_model(tokens)), atol=1e-3)
    exported = policy.export(tiny_model_dir.parent / "exported")
    config = json.loads((exported / "adapter_config.json").read_text())
    assert config["fine_tune_type"] == "lora" and config["lora_parameters"]["rank"] == 3 + 2
    reloaded, _ = load_model(str(tiny_model_dir), exported)  # one plain adapter over the base model
    np.testing.assert_allclose(np.array(reloaded(tokens)), trained, atol=1e-4)


def test_nonfinite_loss_skips_the_update(lora_model, setup, scorer):
    model, tokenizer = lora_model
    learner = GrpoLearner(model, GrpoSettings(kl_coef=0.0), 1.0, tokenizer.eos_token_id)
    name, value = next(iter(trainable_weights(model).items()))
    model.load_weights([(name, mx.full(value.shape, float("nan")))], strict=False)
    before = weights_of(model)
    figures = learner.update([hand_made_group(tokenizer, scorer, setup, MIXED)])
    assert figures["nonfinite_skipped"] == 1 and not math.isfinite(figures["loss"])
    after = weights_of(model)
    assert all(np.array_equal(before[k], after[k], equal_nan=True) for k in before)


# ---- rollouts and expert iteration ---------------------------------------------------------

def test_rollouts_play_whole_games_with_a_group_at_every_position(lora_model, setup, scorer):
    model, tokenizer = lora_model
    rng = np.random.default_rng(1)
    starts = sample_start_states(setup, setup.solver(), ["bunny", "crane"], 2, rng, max_history=2)
    settings = RolloutSettings(group_size=3, max_tokens=8, batch_size=8)
    mx.random.seed(1)
    rollout = play(model, tokenizer, scorer, starts, settings, rng)
    assert len(rollout.games) == 2 and all(g.over for g in rollout.games)
    assert len({g.secret for g in rollout.games}) == 2
    assert all(len(g.completions) == 3 and len(g.rewards.total) == 3 for g in rollout.groups)
    # The random tiny model never answers in format: each game ends after 3 unplayable answers.
    assert len(rollout.groups) == 6 and rollout.stats(0.7)["invalid_rate"] == 1.0
    assert {g.secret for g in rollout.groups} <= {"bunny", "crane"}
    # Each refused answer is named in the game's next prompt, as eval does.
    for game in rollout.games:
        groups = [g for g in rollout.groups if g.secret == game.secret]
        assert len(game.rejected) == 3
        for k, group in enumerate(groups):
            assert group.prompt == prompt_tokens(tokenizer, group.state, game.rejected[:k])
    # Games advance as their own groups finish, in one running batch: the same seed plays the same.
    assert [g.secret for g in rollout.groups] == [s.secret for s in starts for _ in range(3)]  # game by game
    mx.random.seed(1)
    again = play(model, tokenizer, scorer, starts, settings, np.random.default_rng(1))
    assert [[c.tokens for c in g.completions] for g in again.groups] == [[c.tokens for c in g.completions]
                                                                         for g in rollout.groups]


def test_a_grpo_step_says_what_its_time_went_into(lora_model, setup, scorer):
    model, tokenizer = lora_model
    config = build_config({"rollout": {"group_size": 3, "games_per_round": 2, "max_tokens": 8},
                           "grpo": {"tie_threshold": 0.0, "groups_per_step": 1, "micro_batch_tokens": 16}})
    learner = GrpoLearner(model, config.grpo, config.rollout.temperature, tokenizer.eos_token_id)
    rng = np.random.default_rng(2)
    record = run_grpo_step(model, tokenizer, scorer, learner, config,
                           lambda: sample_start_states(setup, setup.solver(), ["bunny", "crane"], 2, rng, 2), rng)
    assert record["informative_groups"] == record["groups"] > 0  # a 0 threshold keeps tied groups
    assert record["won_groups"] == 0  # a tiny random model never names the secret
    assert record["rollout_tokens_per_s"] == pytest.approx(record["answer_tokens"] / record["rollout_seconds"])
    assert record["update_tokens_per_s"] == pytest.approx(record["trained_tokens"] / record["update_seconds"])
    assert record["rollout_share"] == pytest.approx(
        record["rollout_seconds"] / (record["rollout_seconds"] + record["update_seconds"]))
    assert 0 < record["rollout_share"] < 1 and 0 <= record["padding_share"] < 1
    assert record["trained_tokens"] >= record["answer_tokens"]  # an answer that ended on eos trains it too


def test_passing_answers_keep_good_samples_and_the_solver_move(setup, scorer, tiny_model_dir):  # noqa: F811
    _, tokenizer = load_model(str(tiny_model_dir))
    texts = [BAD, format_answer("a", "qqqqq"), GOOD, GOOD, format_answer("b", "salty")]
    group = hand_made_group(tokenizer, scorer, setup, texts)
    threshold = group.rewards.guess_quality[2] - 1e-9  # only the winning answer clears it
    assert passing_answers(group.rewards, "nomad", threshold, keep=4) == [2]  # one answer per guess
    # The solver's move passes whatever it scores; unplayable answers never do.
    assert passing_answers(group.rewards, "salty", threshold, keep=4) == [2, 4]
    assert passing_answers(group.rewards, "zzzzz", 100.0, keep=4) == []
    assert passing_answers(group.rewards, "nomad", 100.0, keep=4) == []


def test_kept_answers_with_false_thoughts_are_trained_with_the_true_one(setup):
    state = setup.start.play("salet", feedback("salet", "bunny"))
    true = truthful_answer(state, "bunny")
    assert truthful_target(state, true, parse_answer(true).thought, "bunny") == true
    false = format_answer("Only vigor remains.", "bunny")
    assert truthful_target(state, false, "Only vigor remains.", "bunny") == true
    rewritten = truthful_target(state, false, "Only vigor remains.", "bunny")
    assert check_thought(state, parse_answer(rewritten).thought, "bunny").accepted


def test_expert_iteration_trains_on_expert_answers_when_no_sample_passes(lora_model, setup, scorer):
    model, tokenizer = lora_model
    ei = ExpertIteration(model, tokenizer, scorer, setup.solver(),
                         EISettings(positions="sampled", states_per_step=2, samples=2, sft_steps=2, batch_size=2,
                                    learning_rate=1e-3),
                         RolloutSettings(max_tokens=8, batch_size=8))
    starts = sample_start_states(setup, setup.solver(), ["bunny", "crane"], 2, np.random.default_rng(2), 2,
                                 min_history=1)
    mx.random.seed(2)
    targets = ei.targets(ei.positions(starts, np.random.default_rng(0)))
    assert targets.expert_states == 2 and len(targets.conversations) == 2
    assert targets.conversations[0][-1]["content"].endswith(f"<guess> {setup.solver().choose(starts[0].state)}</guess>")
    before = weights_of(model)
    figures = ei.step(starts, np.random.default_rng(0))
    after = weights_of(model)
    assert figures["expert_fraction"] == 1.0 and math.isfinite(figures["loss"]) and figures["nonfinite_skipped"] == 0
    assert any(not np.array_equal(before[k], after[k]) for k in before)


def test_expert_iteration_trains_on_the_positions_its_own_games_reach(lora_model, setup, scorer):
    """Played positions: after each refused answer the next position names it, and that
    prompt (with the refusal) is what the target is trained under."""
    model, tokenizer = lora_model
    ei = ExpertIteration(model, tokenizer, scorer, setup.solver(),
                         EISettings(games_per_step=1, samples=2, min_history=1),
                         RolloutSettings(max_tokens=8, batch_size=8))
    starts = sample_start_states(setup, setup.solver(), ["bunny"], 1, np.random.default_rng(1), 2, min_history=1)
    mx.random.seed(1)
    played = ei.positions(starts, np.random.default_rng(0))
    assert len(played.games) == 1 and played.games[0].over
    # The random tiny model never answers in format: three refusals in a row end the game.
    assert [len(g.rejected) for g in played.groups] == [0, 1, 2]
    targets = ei.targets(played)
    assert targets.positions == 3 and targets.expert_states == 3
    prompts = [c[1]["content"] for c in targets.conversations]
    assert prompts[0] == render_state(starts[0].state)
    assert prompts[2] == render_state(starts[0].state, played.groups[2].rejected) != prompts[1]
    move = setup.solver().choose(starts[0].state)
    assert all(c[-1]["content"].endswith(f"<guess> {move}</guess>") for c in targets.conversations)


def test_expert_iteration_replays_the_experts_moves_at_fresh_start_states(lora_model, setup, scorer):
    """Replay targets hold what SFT taught where the model's own games do not train (the opener
    included): each is the expert's move with its thought, under the plain prompt."""
    model, tokenizer = lora_model
    ei = ExpertIteration(model, tokenizer, scorer, setup.solver(),
                         EISettings(games_per_step=1, samples=2, min_history=1, replay=3),
                         RolloutSettings(max_tokens=8, batch_size=8))
    starts = sample_start_states(setup, setup.solver(), ["bunny"], 1, np.random.default_rng(1), 2, min_history=1)
    replay = [StartState("lowly", setup.start, ())] + sample_start_states(
        setup, setup.solver(), ["crane", "lowly"], 2, np.random.default_rng(2), 4)
    mx.random.seed(1)
    targets = ei.targets(ei.positions(starts, np.random.default_rng(0)), replay)
    assert targets.replayed == 3 and len(targets.conversations) == targets.positions + 3
    for start, conversation in zip(replay, targets.conversations[-3:]):
        assert conversation[1]["content"] == render_state(start.state)
        assert conversation[-1]["content"] == expert_answer(setup.solver(), start.state)
    assert targets.conversations[-3][-1]["content"].endswith(f"<guess> {setup.solver().choose(setup.start)}</guess>")


def test_frequent_positions_are_those_the_experts_games_reach_most(setup):
    """Depth 1: one position per pattern after the opener, those most answers give first; depth 2:
    the expert's second move played at them, ranked by how many answers lead there."""
    answers = setup.lists.secrets("answers")
    expert = expert_policy(setup.solver(), "candidates")
    opener = expert.choose(setup.start)
    positions = frequent_positions(setup, expert, answers + (opener,), 40, depth=2)
    openings, seconds = positions[:40], positions[40:]
    row = setup.matrix[setup.lists.index(opener)]
    counts = np.bincount(row[np.arange(len(answers))], minlength=243)
    patterns = [s.state.turns[0].pattern for s in openings]
    assert len(set(patterns)) == 40 and 242 not in patterns  # the opener's own win is no position to teach
    assert [counts[p] for p in patterns] == sorted(counts[:242], reverse=True)[:40]
    assert counts[patterns].sum() / len(answers) > 0.8
    for start in openings:
        assert start.state.turns[0].guess == opener and not start.state.over
        assert feedback(opener, start.secret) == start.state.turns[0].pattern

    def path(secret: str) -> tuple[int, ...]:
        """The patterns of the expert's first two moves against `secret`."""
        state = setup.start.play(opener, feedback(opener, secret))
        return (state.turns[0].pattern, feedback(expert.choose(state), secret))

    reached = Counter(path(a) for a in answers if feedback(opener, a) != 242)
    keys = [tuple(t.pattern for t in s.state.turns) for s in seconds]
    assert len(seconds) == 40 and len(set(keys)) == 40 and all(k[1] != 242 for k in keys)
    assert [reached[k] for k in keys] == sorted((n for k, n in reached.items() if k[1] != 242), reverse=True)[:40]
    for start in seconds:
        first = setup.start.play(opener, start.state.turns[0].pattern)
        assert start.state.turns[1].guess == expert.choose(first) != opener
        assert path(start.secret) == tuple(t.pattern for t in start.state.turns) and start.players == ("solver",) * 2
    every = frequent_positions(setup, expert, answers, 242)  # asking for more than exist gives them all
    assert len(every) == np.count_nonzero(counts[:242]) and [s.secret for s in every[:40]] == [s.secret for s in openings]


def test_expert_iteration_drills_the_same_positions_every_step(lora_model, setup, scorer):
    """Drilled positions join every step's targets, each with the expert's move, whatever was played."""
    model, tokenizer = lora_model
    expert = expert_policy(setup.solver(), "candidates")
    drill = frequent_positions(setup, expert, setup.lists.secrets("answers"), 3)
    ei = ExpertIteration(model, tokenizer, scorer, expert, EISettings(games_per_step=1, samples=2, drill=3),
                         RolloutSettings(max_tokens=8, batch_size=8), drill)
    starts = sample_start_states(setup, setup.solver(), ["bunny"], 1, np.random.default_rng(1), 1, min_history=1)
    mx.random.seed(1)
    for seed in (0, 1):
        targets = ei.targets(ei.positions(starts, np.random.default_rng(seed)))
        assert targets.replayed == 3 and len(targets.conversations) == targets.positions + 3
        for start, conversation in zip(drill, targets.conversations[-3:]):
            assert conversation[1]["content"] == render_state(start.state)
            assert conversation[-1]["content"] == expert_answer(expert, start.state)
            guess = parse_answer(conversation[-1]["content"]).guess
            assert start.state.constraints.allows(guess)  # the candidates expert's move fits the clues


def test_drilled_prompts_name_refused_answers_a_share_of_the_time(lora_model, setup, scorer):
    """With `drill_refused`, drilled prompts name answers refused at that turn (drawn anew each
    step, an earlier guess among them), and the target is still the expert's move."""
    model, tokenizer = lora_model
    expert = expert_policy(setup.solver(), "candidates")
    drill = frequent_positions(setup, expert, setup.lists.secrets("answers"), 20, depth=2)
    ei = ExpertIteration(model, tokenizer, scorer, expert, EISettings(drill=20, drill_depth=2, drill_refused=1.0),
                         RolloutSettings(max_tokens=8, batch_size=8), drill)
    empty = Rollout(groups=[])
    steps = [ei.targets(empty, rng=np.random.default_rng(seed)).conversations for seed in (0, 1)]
    for conversations in steps:
        assert len(conversations) == 40
        for start, conversation in zip(drill, conversations):
            assert conversation[1]["content"].startswith(render_state(start.state).split("\nYou have")[0])
            assert "Not accepted: " in conversation[1]["content"]
            assert conversation[-1]["content"] == expert_answer(expert, start.state)
    assert [c[1]["content"] for c in steps[0]] != [c[1]["content"] for c in steps[1]]  # drawn anew each step
    assert any("(already guessed)" in c[1]["content"] for c in steps[0])
    assert all("Not accepted" not in c[1]["content"] for c in ei.targets(empty).conversations)  # no dice, none


def test_candidate_expert_teaches_words_that_fit_the_clues(lora_model, setup, scorer):
    model, tokenizer = lora_model
    expert = expert_policy(setup.solver(), "candidates")
    state = setup.start.play("salet", feedback("salet", "bunny"))
    move = expert.choose(state)
    answers = setup.lists.secrets("answers")
    remaining = {answers[i] for i in state.candidates}
    assert setup.solver().choose(state) == "cornu" and "cornu" not in remaining
    assert move == "crony" and move in remaining
    ei = ExpertIteration(model, tokenizer, scorer, expert, EISettings(games_per_step=1, samples=2),
                         RolloutSettings(max_tokens=8, batch_size=8))
    start = StartState("bunny", state, ("solver",))
    mx.random.seed(0)
    targets = ei.targets(ei.positions([start], np.random.default_rng(0)))
    assert targets.conversations[0][-1]["content"].endswith("<guess> crony</guess>")


def test_expert_iteration_undoes_a_nonfinite_step(lora_model, setup, scorer):
    model, tokenizer = lora_model
    name, value = next(iter(trainable_weights(model).items()))
    model.load_weights([(name, mx.full(value.shape, float("nan")))], strict=False)
    ei = ExpertIteration(model, tokenizer, scorer, setup.solver(),
                         EISettings(states_per_step=1, samples=1, sft_steps=1, batch_size=1),
                         RolloutSettings(max_tokens=8))
    ei.trainer.optimizer.init(model.trainable_parameters())
    before, step_before = weights_of(model), ei.trainer.steps_done
    starts = sample_start_states(setup, setup.solver(), ["bunny"], 1, np.random.default_rng(0), 1, min_history=1)
    figures = ei.step(starts, np.random.default_rng(0))
    after = weights_of(model)
    assert figures["nonfinite_skipped"] == 1
    assert all(np.array_equal(before[k], after[k], equal_nan=True) for k in before)
    assert ei.trainer.steps_done == step_before


# ---- schedule and config --------------------------------------------------------------------

def test_schedule_parsing_and_phases():
    schedule = parse_schedule(" grpo:2, ei:1 ")
    assert [schedule.phase(s) for s in range(7)] == ["grpo", "grpo", "ei", "grpo", "grpo", "ei", "grpo"]
    assert str(schedule) == "grpo:2,ei:1" and schedule.position(4) == 1
    for bad, words in [("", "empty"), ("grpo", "needs a step count"), ("grpo:0", ">= 1"), ("ppo:3", "unknown phase"),
                       ("grpo:two", "whole number"), ("grpo:2,", "unknown phase")]:
        with pytest.raises(UserError, match=words):
            parse_schedule(bad)


def test_config_files_and_overrides(tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"steps": 7, "grpo": {"kl_coef": 0.1}, "reward": {"win": 3}}))
    config = build_config(load_config_file(tmp_path / "c.yaml"), {"grpo.kl_coef": 0.2, "rollout.group_size": 4})
    assert (config.steps, config.grpo.kl_coef, config.rollout.group_size, config.reward.win) == (7, 0.2, 4, 3.0)
    assert config.grpo.clip_epsilon == RLConfig().grpo.clip_epsilon
    (tmp_path / "c.json").write_text(json.dumps(config.to_json()))
    assert build_config(load_config_file(tmp_path / "c.json")) == config


@pytest.mark.parametrize("data, message", [
    ({"stpes": 3}, "unknown key stpes"),
    ({"grpo": {"kl": 0.1}}, "unknown key grpo.kl"),
    ({"steps": "ten"}, "steps must be a whole number"),
    ({"steps": 2.5}, "steps must be a whole number"),
    ({"grpo": {"advantage_scale": "yes"}}, "grpo.advantage_scale must be one of batch, group, none"),
    ({"grpo": {"tie_threshold": -0.1}}, "grpo.tie_threshold must be >= 0"),
    ({"rollout": {"group_size": 1}}, "rollout.group_size must be >= 2"),
    ({"rollout": {"temperature": 0}}, "rollout.temperature must be > 0"),
    ({"reward": {"thought": -1}}, "reward.thought must be >= 0"),
    ({"reward": {"win": 1.0}}, "reward.win (1.0) must exceed reward.info + reward.thought"),
    ({"rollout": {"choose": "worst"}}, "rollout.choose must be one of best, sampled"),
    ({"schedule": "grpo:4,sft:1"}, "unknown phase 'sft'"),
    ({"grpo": 3}, "grpo must be a mapping"),
    ({"lora": {"full": True}}, "lora.full must be false"),
])
def test_bad_config_values_are_one_line_errors(tmp_path, data, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run_cli("rl", "--model", "unused", "--out", tmp_path / "run", "--config", path)
    assert result.exit_code == 2
    assert message in result.output and result.output.count("\n") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_bad_flags_and_files_are_one_line_errors(tmp_path):
    (tmp_path / "broken.yaml").write_text("steps: [1,\n")
    for args, message in [(["--steps", "0"], "--steps must be >= 1"), (["--schedule", "grpo:x"], "whole number"),
                          (["--group-size", "1"], "--group-size must be >= 2"),
                          (["--config", tmp_path / "missing.yaml"], "cannot read config"),
                          (["--config", tmp_path / "broken.yaml"], "not valid YAML")]:
        result = run_cli("rl", "--model", "unused", "--out", tmp_path / "run", *args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)
    result = run_cli("rl", "--out", tmp_path / "run", "--resume")
    assert result.exit_code == 2 and "no checkpoint to resume" in result.output


def test_messages_name_the_flag_or_the_file_that_gave_a_setting(tmp_path):
    """A bad flag beside --config is the flag's mistake, and without a config no internal key is named."""
    (tmp_path / "c.yaml").write_text("rollout:\n  group_size: 4\neval_every: 5\n")
    cases = [
        (["--config", tmp_path / "c.yaml", "--group-size", "1"], "error: --group-size must be >= 2 and <= 256, got 1"),
        (["--config", tmp_path / "c.yaml", "--eval-games", "0"],
         f"error: config {tmp_path / 'c.yaml'}: eval_every is 5 but --eval-games and eval_endgame are 0: "
         "give one of them, or eval_every 0 for no held-out evals"),
        (["--eval-every", "5", "--eval-games", "0"],
         "error: --eval-every is 5 but --eval-games and --eval-endgame are 0: give one of them, "
         "or --eval-every 0 for no held-out evals"),
        (["--best-by", "endgame"], "error: --best-by endgame needs --eval-endgame > 0"),
        (["--best-by", "luck"], "error: --best-by must be one of wins, endgame, got 'luck'"),
    ]
    for args, line in cases:
        result = run_cli("rl", "--model", "unused", "--out", tmp_path / "run", *args)
        assert result.exit_code == 2 and result.stderr.strip() == line, (args, result.output)


def test_eval_games_0_means_no_held_out_evals_as_in_sft():
    assert build_config({}, {"eval_games": 0}).eval_every == 0
    assert build_config({}, {"eval_games": 0, "eval_endgame": 8, "best_by": "endgame"}).eval_every == RLConfig().eval_every


# ---- whole runs ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def start_adapter(tmp_path_factory, tiny_model_dir):  # noqa: F811
    """An adapter standing in for an SFT run's: rank 3, random non-zero weights."""
    model, _ = load_model(str(tiny_model_dir))
    mx.random.seed(11)
    config = attach_adapter(model, AdapterSettings(rank=3, scale=10.0))
    model.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.02, model.trainable_parameters()))
    return save_adapter(tmp_path_factory.mktemp("sft") / "adapter", trainable_weights(model), config)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, tiny_model_dir, start_adapter):  # noqa: F811
    out = tmp_path_factory.mktemp("rl") / "reference"
    summary = run_rl(RunRequest(str(tiny_model_dir), str(start_adapter), out, build_config(TINY_RUN),
                                show_progress=False))
    return out, summary


def deterministic(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_FIGURES} for r in records]


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_run_logs_every_step_and_never_plays_held_out_secrets(reference_run, tiny_model_dir):  # noqa: F811
    out, summary = reference_run
    records = read_metrics(out)
    assert [(r["step"], r["phase"]) for r in records] == [(0, "heldout"), (1, "ei"), (2, "grpo"), (2, "heldout"),
                                                          (3, "ei"), (3, "heldout")]
    evals = [r for r in records if r["phase"] == "heldout"]
    records = [r for r in records if r["phase"] != "heldout"]
    grpo = records[1]
    # The tiny model answers garbage: every group ties, is dropped, and the step is skipped.
    assert grpo["dropped_fraction"] == 1.0 and grpo["skipped"] and grpo["games"] == 2
    for key in ("reward_mean", "reward_std", "reward_format", "reward_win", "win_rate", "invalid_rate",
                "tokens_per_s", "rollout_tokens_per_s", "update_tokens_per_s", "rollout_share", "peak_memory_gb"):
        assert key in grpo
    assert records[0]["expert_fraction"] == 1.0 and math.isfinite(records[0]["loss"])
    assert not any(is_held_out(s) for r in records for s in r["secrets"])
    assert summary["steps"] == 3 and summary["grpo_steps"] == 1 and summary["ei_steps"] == 2
    # The random model wins no held-out game: the start model's eval stays the best.
    assert all(r["heldout_games"] == 3 and r["heldout_wins"] == 0 and r["heldout_temperature"] == 0.7 for r in evals)
    assert json.loads((out / "best.json").read_text())["step"] == 0 == summary["best_step"]
    assert summary["heldout_start"]["step"] == 0 and summary["heldout_last"]["step"] == 3
    load_model(str(tiny_model_dir), out / "best")
    # The final adapter loads like any other and differs from a fresh one (EI trained it).
    model, _ = load_model(str(tiny_model_dir), out / "adapter")
    assert any(float(mx.abs(v).max()) > 0 for k, v in tree_flatten(model.parameters()) if "lora_b" in k)
    assert latest_checkpoint(out).name == "step-0000003"
    # The same command again continues the run (here: it is done); a changed setting is refused, by its flag.
    before = (out / "metrics.jsonl").read_text()
    again = run_cli("rl", "--model", tiny_model_dir, "--out", out, "--group-size", "2", "--quiet")
    assert again.exit_code == 0, again.output
    assert (out / "metrics.jsonl").read_text() == before
    for flags in (["--resume", "--group-size", "4"], ["--group-size", "4"]):
        result = run_cli("rl", "--model", tiny_model_dir, "--out", out, *flags)
        assert result.exit_code == 2 and "only --steps may change (got --group-size)" in result.output, result.output
    result = run_cli("rl", "--model", f"{tiny_model_dir}-other", "--out", out, "--resume")
    assert result.exit_code == 2 and "(got --model)" in result.output


LAUNCHER = """
import pathlib, sys, time
import sft.checkpoint as checkpoint

real, marker = checkpoint.atomic_replace_dir, pathlib.Path(sys.argv[1])

def build_then_hang(final, build):
    def slow(folder):
        build(folder)
        if final.name == "step-0000002":  # every file of this checkpoint is written, not yet renamed
            marker.write_text("saving")
            time.sleep(120)
    real(final, slow)

checkpoint.atomic_replace_dir = build_then_hang
from cli import cli
cli(sys.argv[2:])
"""


def test_kill_during_save_keeps_the_last_checkpoint_and_resume_is_exact(tmp_path, reference_run, start_adapter,
                                                                       tiny_model_dir):  # noqa: F811
    reference, _ = reference_run
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(TINY_RUN))
    (tmp_path / "launch.py").write_text(LAUNCHER)
    marker, out = tmp_path / "saving", tmp_path / "run"
    process = subprocess.Popen([sys.executable, tmp_path / "launch.py", marker, "rl", "--model", tiny_model_dir,
                                "--adapter", start_adapter, "--out", out, "--config", config, "--quiet"],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 240
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), process.stderr.read().decode()[-2000:]
    process.kill()  # SIGKILL, mid-save
    process.wait()
    assert any(p.name.startswith(".step-0000002") for p in (out / "checkpoints").iterdir())  # the half-saved one
    assert latest_checkpoint(out).name == "step-0000001"
    model, _ = load_model(str(tiny_model_dir))
    attach_adapter(model, AdapterSettings(rank=2))
    assert load_checkpoint(out, model, PhaseOptimizers(optim.Adam(1e-3), optim.Adam(1e-3))).step == 1

    result = run_cli("rl", "--out", out, "--resume", "--quiet")
    assert result.exit_code == 0, result.output
    assert deterministic(read_metrics(out)) == deterministic(read_metrics(reference))
    best, expected_best = (json.loads((p / "best.json").read_text()) for p in (out, reference))
    assert {**best, "adapter": None} == {**expected_best, "adapter": None}
    resumed, expected = (mx.load(str(p / "adapter" / "adapters.safetensors")) for p in (out, reference))
    assert all(np.array_equal(np.array(resumed[k]), np.array(expected[k])) for k in expected)


def test_run_killed_before_its_first_checkpoint_starts_again_on_resume(tmp_path, reference_run, start_adapter,
                                                                       tiny_model_dir, monkeypatch):  # noqa: F811
    reference, _ = reference_run
    out = tmp_path / "run"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the moment the first checkpoint would be written

    monkeypatch.setattr("rl.lora_loop.save_checkpoint", killed)
    with pytest.raises(KeyboardInterrupt):
        run_rl(RunRequest(str(tiny_model_dir), str(start_adapter), out, build_config(TINY_RUN), show_progress=False))
    monkeypatch.undo()
    assert latest_checkpoint(out) is None and [r["step"] for r in read_metrics(out)] == [0, 1]
    assert (out / "best.json").is_file()  # the step-0 eval's

    result = run_cli("rl", "--out", out, "--resume", "--quiet")
    assert result.exit_code == 0, result.output
    assert "no checkpoint yet; its run starts again from step 0" in result.output
    assert deterministic(read_metrics(out)) == deterministic(read_metrics(reference))


def test_the_same_command_again_on_a_run_killed_before_its_first_checkpoint_says_it_starts_again(
        tmp_path, reference_run, start_adapter, tiny_model_dir):  # noqa: F811
    """Issue 63: `rl --out R` again (no --resume) on a run killed before its first checkpoint starts
    it again with the note `sft` gives and the README promises; it was silent."""
    reference, _ = reference_run
    out = shutil.copytree(reference, tmp_path / "run")
    shutil.rmtree(out / "checkpoints")
    (out / "latest").unlink()
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(TINY_RUN))
    result = run_cli("rl", "--model", tiny_model_dir, "--adapter", start_adapter, "--out", out, "--config", config,
                     "--quiet")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"note: {out} has no checkpoint yet; its run starts again from step 0"]
    assert deterministic(read_metrics(out)) == deterministic(read_metrics(reference))


def test_a_resume_stops_in_one_line_on_a_log_line_that_is_not_a_step_and_on_fewer_steps(tmp_path, reference_run):
    """Issue 63: `rl --out R` again with `{"note": 1}` or `null` in R/metrics.jsonl was KeyError: 'step'
    or TypeError; `rl --out R --steps 2` on a run at step 3 blamed --resume, which was not given."""
    reference, _ = reference_run
    for number, line in enumerate(('{"note": 1}', "null")):
        run = shutil.copytree(reference, tmp_path / f"run{number}")
        with (run / "metrics.jsonl").open("a") as log:
            log.write(line + "\n")
        added = len(read_metrics(reference)) + 1
        error = one_error_line(run_cli("rl", "--out", run, "--steps", "4", "--quiet"))
        assert error.startswith(f"error: {run / 'metrics.jsonl'} line {added} is not a step record"), error
        assert latest_checkpoint(run).name == "step-0000003"
    run = shutil.copytree(reference, tmp_path / "short")
    assert one_error_line(run_cli("rl", "--out", run, "--steps", "2", "--quiet")) == (
        f"error: --steps 2: the run in {run} has done 3 steps already; give --steps 3 or more to run it longer, "
        "or choose another --out for a new run")


def one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_corrupt_run_files_and_a_resume_past_the_end_are_one_line_errors(tmp_path, reference_run):
    reference, _ = reference_run

    def state_with(**changes):
        def edit(run: Path) -> None:
            state = latest_checkpoint(run) / "state.json"
            saved = json.loads(state.read_text())
            saved["extra"].update(changes)
            state.write_text(json.dumps(saved))
        return edit

    cases = [
        (lambda run: (run / "run.json").write_text("{not json"), [], "run.json: not valid JSON"),
        (lambda run: (run / "run.json").write_bytes(b"\x96" * 8), [], "run.json is not UTF-8 text"),
        (lambda run: (run / "run.json").write_text('{"model": 7}'), [], "run.json is corrupt"),
        (state_with(rng={"bit_generator": "PCG64", "state": {"state": "x", "inc": 1}}), [],
         "its rng state does not load"),
        (state_with(rng=[1, 2]), [], "its rng state does not load (state must be a dict)"),
        (state_with(best={"wins": 3}), [], "its best eval has no step"),
        (lambda run: None, ["--steps", "2"], "--steps 2: the run in"),
    ]
    for number, (edit, flags, message) in enumerate(cases):
        run = tmp_path / f"run{number}"
        shutil.copytree(reference, run)
        edit(run)
        assert message in one_error_line(run_cli("rl", "--out", run, "--resume", "--quiet", *flags)), message
        assert latest_checkpoint(run).name == "step-0000003"


def test_resume_from_another_directory_after_a_relative_model(tmp_path, tiny_model_dir, monkeypatch):  # noqa: F811
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({**TINY_RUN, "steps": 1, "eval_every": 0}))
    out = tmp_path / "run"
    monkeypatch.chdir(tiny_model_dir.parent)
    result = run_cli("rl", "--model", tiny_model_dir.name, "--out", out, "--config", config, "--quiet")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "run.json").read_text())["model"] == str(tiny_model_dir.resolve())
    monkeypatch.chdir(tmp_path)
    result = run_cli("rl", "--out", out, "--resume", "--steps", "2", "--quiet")
    assert result.exit_code == 0, result.output
    assert [(r["step"], r["phase"]) for r in read_metrics(out)] == [(1, "ei"), (2, "grpo")]


def test_report_draws_the_curves(reference_run, tmp_path):
    out, _ = reference_run
    result = run_cli("report", out, "--json", tmp_path / "report.json")
    assert result.exit_code == 0, result.output
    assert "cumulative_wins" in result.output and "reward_mean" in result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["curves"]["reward_mean"]["step"] == [1, 2, 3]
    assert report["curves"]["cumulative_wins"] == {"step": [2], "value": [0]}
    assert report["curves"]["heldout_wins"] == {"step": [0, 2, 3], "value": [0, 0, 0]}
    assert "heldout_later_consistency_rate" in report["curves"]  # the rate past the opener (none played here)
    assert report["title"].endswith("(3 held-out games at temperature 0.7)") and "heldout_wins" in result.output
    assert run_cli("report", tmp_path / "nothing").exit_code == 2
    pytest.importorskip("matplotlib")
    assert run_cli("report", out, "--png", tmp_path / "curves.png").exit_code == 0
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_curves_and_sparklines_on_hand_made_metrics():
    records = [{"step": 1, "phase": "grpo", "games": 4, "wins": 1, "win_rate": 0.25, "reward_mean": 0.5},
               {"step": 2, "phase": "ei", "reward_mean": 0.7},
               {"step": 3, "phase": "grpo", "games": 4, "wins": 3, "win_rate": 0.75, "reward_mean": 1.5}]
    series = curves(records)
    assert series["cumulative_wins"] == {"step": [1, 3], "value": [1, 4]}
    assert series["win_rate"]["value"] == [0.25, 0.75] and series["reward_mean"]["step"] == [1, 2, 3]
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█" and sparkline([2, 2]) == "▁▁"
    assert len(sparkline(list(range(1000)), width=40)) == 40


def test_advantage_study_sorts_groups_and_shares_the_weight():
    from studies.advantage import group_kind, weight_shares

    win, playable, quality, near = (np.array([0.6, 3.5]), np.array([0.0, 0.9]), np.array([0.6, 1.4]),
                                    np.array([1.00, 1.04]))
    assert [group_kind(g) for g in (win, playable, quality, near)] == ["win", "playable", "quality", "near_tie"]
    step = [win, playable, quality, near]
    by_group = weight_shares([step], "group", 0.0)
    assert by_group["near_tie"] == pytest.approx(0.25, abs=1e-3)  # the group std makes every group weigh the same
    by_batch = weight_shares([step], "batch", 0.0)
    assert by_batch["near_tie"] < 0.02 and by_batch["win"] > 0.5
    assert weight_shares([step], "batch", 0.05)["kept_groups"] == 3


def test_expert_iteration_positions_start_after_the_opener(setup):
    """EI draws positions from turn 2 on (the empty board's target is always the opener);
    rollouts and gen-sft keep drawing empty boards too."""
    solver, rng = setup.solver(), np.random.default_rng(4)
    ei = sample_start_states(setup, solver, ["bunny", "crane", "lowly"], 60, rng, 4, min_history=EISettings().min_history)
    assert EISettings().min_history == 1 and all(s.state.turns for s in ei)
    plain = sample_start_states(setup, solver, ["bunny", "crane", "lowly"], 60, np.random.default_rng(4), 4)
    assert any(not s.state.turns for s in plain)


def test_a_checkpoint_loads_as_the_policy_it_was(reference_run, tiny_model_dir):  # noqa: F811
    """A checkpoint holds RL's own LoRA over the start adapter; loaded by itself (eval --adapter
    RUN/checkpoints/step-N) it must play as the run's policy at that step, not as the bare model."""
    out, _ = reference_run
    last = out / "checkpoints" / "step-0000003"
    assert json.loads((last / "adapter_config.json").read_text())["stacked_on"] == "../../start_adapter"
    tokens = mx.array([[1, 5, 9, 2, 7, 3]])
    logits = [load_model(str(tiny_model_dir), adapter)[0](tokens) for adapter in (last, out / "adapter")]
    bare = load_model(str(tiny_model_dir))[0](tokens)
    assert mx.allclose(logits[0], logits[1], atol=1e-4).item()
    assert not mx.allclose(logits[0], bare, atol=1e-3).item()


def test_rl_refuses_to_start_from_a_checkpoint_of_another_run(reference_run, tiny_model_dir, tmp_path):  # noqa: F811
    out, _ = reference_run
    result = run_cli("rl", "--model", tiny_model_dir, "--adapter", out / "checkpoints" / "step-0000003",
                     "--out", tmp_path / "run", "--quiet")
    assert result.exit_code == 2 and "RL checkpoint's own LoRA" in result.output
    assert not (tmp_path / "run").exists()
