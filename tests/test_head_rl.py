"""Head RL (rl/head_policy.py, rl/head_games.py, rl/head_loop.py): the naming head trained as
the policy's word choice by GRPO and expert iteration, and `rl` running it from a start with a head."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten
import pytest
from click.testing import CliRunner

from cli import cli
from llm.adapter_files import save_adapter
from llm.loading import load_model
from llm.naming_head import HEAD_FILE, NamingHead
from llm.word_steering import WordTokens, word_basis
from llm_fixtures import tiny_model_dir  # noqa: F401
from rl.head_games import NamingRecords, position_of_key
from rl.head_loop import HeadModule, StateBank, _step
from rl.head_policy import HeadBasis, HeadRLSettings, group_advantages, masked_rows, word_log_probs
from rl.naming_head import one_candidate_positions
from rl.reward import RewardScorer
from sft.lora import AdapterSettings, attach_adapter, trainable_weights
from solver.setup import load_setup


def test_group_advantages_normalise_each_group_and_drop_the_ones_without_signal():
    rewards = np.array([[1.0, 3.0, 1.0, 3.0], [2.0, 2.0, 2.0, 2.0]])
    advantages, kept = group_advantages(rewards)
    assert kept.tolist() == [True, False]
    assert np.allclose(advantages[0], [-1, 1, -1, 1]) and np.allclose(advantages[1], 0)


def test_banned_words_get_no_probability_and_the_rest_sum_to_one(tiny_model_dir):  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    words = ["crane", "slate", "jumpy", "vowel"]
    basis = HeadBasis(*word_basis(model, WordTokens.of(tokenizer, words)))
    hidden = model.args.hidden_size
    params = {"down": mx.zeros((2, hidden)), "up": mx.zeros((hidden, 2)), "letters": mx.zeros((156, hidden)),
              "log_gains": mx.zeros(3), "secret_bias": mx.array(0.0)}
    states = mx.array(np.random.default_rng(0).normal(size=(3, hidden)).astype(np.float32))
    banned = masked_rows([np.array([0]), np.array([], np.int64), np.array([1, 3])], len(words))
    probs = np.exp(np.array(word_log_probs(params, basis, states, banned, 0.7)))
    assert probs[0, 0] == 0 and probs[2, 1] == 0 and probs[2, 3] == 0
    assert np.allclose(probs.sum(axis=1), 1, atol=1e-5)


def test_grpo_and_expert_iteration_on_the_head_raise_the_secrets_probability_where_they_train(
        tiny_model_dir):  # noqa: F811
    """At one-candidate positions, each with its own state (a distinct random vector), GRPO steps on the head's own drawn words, scored by the reward
    kernel, make the secret more likely; tied groups are dropped; the KL to the start grows from 0."""
    model, tokenizer = load_model(str(tiny_model_dir))
    setup = load_setup("answers")
    words = setup.lists.allowed
    basis = HeadBasis(*word_basis(model, WordTokens.of(tokenizer, list(words))))
    hidden = model.args.hidden_size
    secrets = ["crane", "slate", "ghost", "mango", "fjord", "pilot"]
    positions = one_candidate_positions(setup, secrets, 6, 0)
    states = 3 * np.random.default_rng(0).normal(size=(len(positions), hidden)).astype(np.float32)
    index = {w: i for i, w in enumerate(words)}
    banned = [np.array(sorted(index[g] for g in p.state.guesses)) for p in positions]
    bank = StateBank(positions, states, banned, RewardScorer(setup))
    from llm.naming_head import spelling_features

    spelled = spelling_features([p.secret for p in positions])  # (6, 156)
    letters = 1.5 * spelled.T @ np.linalg.pinv(states.T)  # letters @ h_i = 1.5 * spelling(secret_i)
    head = NamingHead(np.zeros((2, hidden), np.float32), np.zeros((hidden, 2), np.float32),
                      letters.astype(np.float32), 0.01)
    module, reference = HeadModule(head), HeadModule(head).params()
    settings = HeadRLSettings(group_size=16, states_per_step=6, lr=3e-3, kl_coef=0.0, teacher_share=0.0)
    optimizer = optim.AdamW(learning_rate=settings.lr)
    from rl.head_loop import expert_loss, grpo_loss

    losses = {"grpo": nn.value_and_grad(module, lambda m, *a: grpo_loss(m.params(), *a)),
              "ei": nn.value_and_grad(module, lambda m, *a: expert_loss(m.params(), *a))}
    empty = StateBank([], np.zeros((0, hidden), np.float32), [], bank.scorer)

    def secret_p() -> float:
        log_p = np.array(word_log_probs(module.params(), basis, mx.array(states), masked_rows(banned, len(words)), 0.7))
        return float(np.mean([np.exp(log_p[i, index[p.secret]]) for i, p in enumerate(positions)]))

    before = secret_p()
    rng = np.random.default_rng(0)
    mx.random.seed(0)
    records = [_step("grpo", module, optimizer, losses["grpo"], basis, reference, bank, empty, settings, 0.7, rng)
               for _ in range(12)]
    after_grpo = secret_p()
    assert after_grpo > before + 0.2
    assert all(0 <= r["dropped_fraction"] <= 1 for r in records) and any((r["kl"] or 0) > 0 for r in records)
    ei = _step("ei", module, optimizer, losses["ei"], basis, reference, bank, empty, settings, 0.7, rng)
    assert ei["kept_fraction"] > 0 and secret_p() > after_grpo


def test_gains_alone_learn_to_trust_an_underweighted_letter_reading_and_leave_the_arrays(
        tiny_model_dir):  # noqa: F811
    """A head whose letter scores name each secret but at a third of the weight that would pick it:
    GRPO and expert iteration on the three gains only (`params: gains`) raise the letters' gain and
    the secret's probability, the arrays stay as fitted, and the exported head scores as the module."""
    from llm.naming_head import spelling_features
    from rl.head_loop import expert_loss, grpo_loss
    from rl.head_policy import HEAD_PARAMS, as_head

    model, tokenizer = load_model(str(tiny_model_dir))
    setup = load_setup("answers")
    words = setup.lists.allowed
    basis = HeadBasis(*word_basis(model, WordTokens.of(tokenizer, list(words))))
    hidden = model.args.hidden_size
    positions = one_candidate_positions(setup, ["crane", "slate", "ghost", "mango", "fjord", "pilot"], 6, 0)
    states = 3 * np.random.default_rng(0).normal(size=(len(positions), hidden)).astype(np.float32)
    index = {w: i for i, w in enumerate(words)}
    banned = [np.array(sorted(index[g] for g in p.state.guesses)) for p in positions]
    bank = StateBank(positions, states, banned, RewardScorer(setup))
    letters = 0.5 * spelling_features([p.secret for p in positions]).T @ np.linalg.pinv(states.T)
    head = NamingHead(np.zeros((2, hidden), np.float32), np.zeros((hidden, 2), np.float32),
                      letters.astype(np.float32), 0.01)
    module, reference = HeadModule(head, HEAD_PARAMS["gains"]), HeadModule(head).params()
    assert set(dict(tree_flatten(module.trainable_parameters()))) == {"log_gains", "secret_bias"}
    settings = HeadRLSettings(group_size=16, states_per_step=6, kl_coef=0.0, teacher_share=0.0, params="gains",
                              gains_lr=0.05)
    optimizer = optim.AdamW(learning_rate=settings.learning_rate, weight_decay=0.0)
    losses = {"grpo": nn.value_and_grad(module, lambda m, *a: grpo_loss(m.params(), *a)),
              "ei": nn.value_and_grad(module, lambda m, *a: expert_loss(m.params(), *a))}
    empty = StateBank([], np.zeros((0, hidden), np.float32), [], bank.scorer)
    ban_rows = masked_rows(banned, len(words))

    def secret_p() -> float:
        log_p = np.array(word_log_probs(module.params(), basis, mx.array(states), ban_rows, 0.7))
        return float(np.mean([np.exp(log_p[i, index[p.secret]]) for i, p in enumerate(positions)]))

    before = secret_p()
    rng = np.random.default_rng(0)
    mx.random.seed(0)
    for step in range(20):
        phase = "ei" if step % 5 == 4 else "grpo"
        _step(phase, module, optimizer, losses[phase], basis, reference, bank, empty, settings, 0.7, rng)
    gains = np.exp(np.array(module.log_gains))
    assert gains[2] > 1.5 and secret_p() > before + 0.2
    print("BIAS", float(module.secret_bias))
    assert all(np.array_equal(np.array(getattr(module, k)), getattr(head, k)) for k in ("down", "up", "letters"))
    exported = as_head(module.params(), head.beta)
    assert np.allclose(exported.gains, gains)
    from llm.word_steering import head_scorer

    scored = head_scorer(model, exported, WordTokens.of(tokenizer, list(words)))(mx.array(states)) / 0.7
    played = word_log_probs(module.params(), basis, mx.array(states), mx.zeros_like(ban_rows), 0.7)
    assert np.allclose(np.array(scored - mx.logsumexp(scored, axis=-1, keepdims=True)), np.array(played), atol=1e-3)


def test_naming_records_round_trip_with_their_positions(tmp_path):
    setup = load_setup("answers")
    positions = one_candidate_positions(setup, ["crane", "ghost"], 2, 0)
    records = NamingRecords(positions, np.ones((2, 4), np.float32), [np.array([1, 5]), np.array([], np.int64)],
                            np.array([3, -1]))
    records.save(tmp_path / "r.npz")
    again = NamingRecords.load(tmp_path / "r.npz", setup)
    assert [p.key for p in again.positions] == [p.key for p in positions]
    assert [b.tolist() for b in again.banned] == [[1, 5], []] and again.named.tolist() == [3, -1]
    assert position_of_key(positions[0].key, setup).state.candidates.tolist() == positions[0].state.candidates.tolist()


@pytest.fixture
def adapter_with_head(tiny_model_dir, tmp_path):  # noqa: F811
    model, _ = load_model(str(tiny_model_dir))
    mx.random.seed(0)
    config = attach_adapter(model, AdapterSettings(rank=2))
    adapter = save_adapter(tmp_path / "adapter", trainable_weights(model), config)
    result = CliRunner().invoke(cli, ["naming-head", "--model", str(tiny_model_dir), "--adapter", str(adapter),
                                      "--positions", "6", "--validation-positions", "3", "--epochs", "4",
                                      "--rank", "2", "--quiet"])
    assert result.exit_code == 0, result.output
    return adapter


def test_rl_from_a_start_with_a_head_trains_the_head_keeps_the_best_and_resumes_exactly(
        tiny_model_dir, adapter_with_head, tmp_path):  # noqa: F811
    """`rl --adapter A` where A has a naming head: the model plays training games with it, the head's
    gains are trained (the adapter and the head's arrays not), RUN/best and RUN/adapter hold the adapter and a head, and the same
    command with more --steps continues from the last checkpoint to what one run of as many steps
    gives, figure for figure."""
    config = tmp_path / "head.yaml"  # fit: every drawn word scores by its share of the clues, so groups vary
    config.write_text("head: {states_per_step: 4, group_size: 4, lr: 0.0001}\nrollout: {max_tokens: 24}\n"
                      "reward: {fit: 1.0}\n")

    def run(out, steps: int):
        result = CliRunner().invoke(cli, ["rl", "--model", str(tiny_model_dir), "--adapter", str(adapter_with_head),
                                          "--out", str(out), "--config", str(config), "--head-games", "2",
                                          "--eval-every", "1", "--checkpoint-every", "1", "--quiet",
                                          "--steps", str(steps)])
        assert result.exit_code == 0, result.output
        return [{k: v for k, v in json.loads(line).items() if k != "seconds"}
                for line in (out / "metrics.jsonl").read_text().splitlines()]

    out = tmp_path / "run"
    records = run(out, 3)
    for folder in ("best", "adapter"):
        NamingHead.load(out / folder / HEAD_FILE)
        assert (out / folder / "adapters.safetensors").read_bytes() == (adapter_with_head /
                                                                          "adapters.safetensors").read_bytes()
    assert [r["step"] for r in records] == [0, 1, 2, 3] and all("validation_p_secret" in r for r in records)
    assert all(r["loss"] is not None for r in records[1:])
    assert len(json.loads((out / "head_games.json").read_text())["games"]) == 2
    start = NamingHead.load(adapter_with_head / HEAD_FILE)
    trained = NamingHead.load(out / "adapter" / HEAD_FILE)  # by default its gains, not its arrays
    assert not np.array_equal(trained.gains, start.gains) and np.array_equal(trained.letters, start.letters)

    resumed = run(out, 5)
    straight = run(tmp_path / "straight", 5)
    assert resumed == straight and [r["step"] for r in resumed] == [0, 1, 2, 3, 4, 5]
    assert np.array_equal(NamingHead.load(out / "adapter" / HEAD_FILE).gains,
                          NamingHead.load(tmp_path / "straight" / "adapter" / HEAD_FILE).gains)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["best_step"] in range(6)


def test_head_on_without_a_head_is_one_clear_error(tiny_model_dir, tmp_path):  # noqa: F811
    model, _ = load_model(str(tiny_model_dir))
    config = attach_adapter(model, AdapterSettings(rank=2))
    adapter = save_adapter(tmp_path / "adapter", trainable_weights(model), config)
    result = CliRunner().invoke(cli, ["rl", "--model", str(tiny_model_dir), "--adapter", str(adapter),
                                      "--out", str(tmp_path / "run"), "--head", "on", "--steps", "1", "--quiet"])
    assert result.exit_code == 2 and "has no naming head" in result.output
