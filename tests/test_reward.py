"""The reward kernel: its components on hand-made answers, and the properties RL relies on.

Reward hacking seen in earlier attempts (NOTES.md): invalid words inside <guess>, empty
or garbage output, several tags, repeating a guess. None of them may pay.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm.format import format_answer
from rl.reward import COMPONENTS, RewardScorer, RewardWeights
from solver.entropy import score_guesses
from solver.feedback import feedback
from solver.setup import load_setup


@pytest.fixture(scope="module")
def setup(small_lists_files):
    answers, allowed = small_lists_files
    return load_setup("answers", str(answers), str(allowed))


@pytest.fixture(scope="module")
def scorer(setup):
    return RewardScorer(setup)


def played(setup, secret, *guesses):
    state = setup.start
    for guess in guesses:
        state = state.play(guess, feedback(guess, secret))
    return state


def answer(word: str, thought: str = "thinking") -> str:
    return format_answer(thought, word)


def test_components_of_hand_made_answers(setup, scorer):
    secret = setup.lists.answers[10]
    opener = next(w for w in setup.lists.answers if len(played(setup, secret, w).candidates) >= 2)
    state = played(setup, secret, opener)
    candidate = next(w for w in state.candidate_words() if w != secret)
    texts = [answer(secret), answer(candidate), answer(opener), answer("zzzzz"), "no tags at all", ""]
    rewards = scorer.score(texts, state, secret)
    parts = {name: rewards.component(name) for name in COMPONENTS}
    w = scorer.weights
    # The secret: every credit, and a win on guess 2 of 6 earns 4/5 of the speed bonus.
    assert parts["format"][0] == w.format and parts["valid"][0] == w.valid and parts["consistent"][0] == w.consistent
    assert parts["win"][0] == pytest.approx(w.win + w.speed * 4 / 5)
    # Another candidate: consistent, no win.
    assert parts["consistent"][1] == w.consistent and parts["win"][1] == 0
    # Replaying the opener: format credit and the repeat penalty only.
    assert parts["repeat"][2] == -w.repeat and parts["valid"][2] == 0 and parts["info"][2] == 0
    assert rewards.total[2] == pytest.approx(w.format - w.repeat)
    # Not a word: format credit only. No tags / empty: nothing.
    assert rewards.total[3] == pytest.approx(w.format)
    assert rewards.total[4] == rewards.total[5] == 0.0
    assert rewards.parsed.failures == (None, None, "already_guessed", "not_allowed", "no_tags", "no_tags")
    np.testing.assert_allclose(rewards.components.sum(axis=1), rewards.total)


def test_information_is_relative_to_the_best_guess(setup, scorer):
    """info = weight * entropy / best entropy over every allowed guess, from the solver's own scorer."""
    state = played(setup, setup.lists.answers[5], setup.lists.answers[100])
    entropy, _ = score_guesses(setup.matrix, np.arange(len(setup.lists.allowed)), state.candidates)
    words = [setup.lists.allowed[int(np.argmax(entropy))], setup.lists.allowed[int(np.argmin(entropy))],
             setup.lists.allowed[17]]
    rewards = scorer.score([answer(w) for w in words], state)
    expected = [entropy[setup.lists.index(w)] / entropy.max() * scorer.weights.info for w in words]
    np.testing.assert_allclose(rewards.component("info"), expected, rtol=1e-9)
    assert rewards.component("info")[0] == pytest.approx(scorer.weights.info)
    assert rewards.component("win").sum() == 0  # no secret given: nothing wins


def test_one_candidate_left_pays_info_only_for_it(setup, scorer):
    secret = setup.lists.answers[42]
    state = setup.start
    solver = setup.solver()
    while len(state.candidates) > 1:
        guess = solver.choose(state)
        if guess == secret:
            break
        state = state.play(guess, feedback(guess, secret))
    if len(state.candidates) != 1:
        pytest.skip("the solver found this secret before narrowing it to one candidate")
    other = next(w for w in setup.lists.answers if w != secret and w not in state.guesses)
    rewards = scorer.score([answer(secret), answer(other)], state, secret)
    assert rewards.component("info")[0] == scorer.weights.info
    assert rewards.component("info")[1] == 0


def test_weights_scale_components_and_bound_the_total(setup):
    weights = RewardWeights(format=1.0, valid=0.0, consistent=2.0, info=0.0, win=5.0, speed=0.0, repeat=3.0)
    scorer = RewardScorer(setup, weights)
    secret = setup.lists.answers[3]
    rewards = scorer.score([answer(secret)], setup.start, secret)
    assert rewards.total[0] == pytest.approx(1.0 + 2.0 + 5.0)
    assert weights.bounds == (-3.0, 8.0)


def test_tied_groups_are_flagged(setup, scorer):
    assert scorer.score(["garbage", "more garbage"], setup.start).tied
    assert not scorer.score(["garbage", answer(setup.lists.answers[0])], setup.start).tied


# ---- properties -------------------------------------------------------------------------

positions = st.tuples(st.integers(0, 299), st.lists(st.integers(0, 299), min_size=0, max_size=4))


def position(setup, secret_index, guess_indices):
    secret = setup.lists.answers[secret_index]
    guesses = [setup.lists.answers[i] for i in dict.fromkeys(guess_indices) if setup.lists.answers[i] != secret]
    return secret, played(setup, secret, *guesses)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(positions, st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=5, max_size=5))
def test_invalid_word_never_beats_a_valid_consistent_guess(setup, scorer, where, word):
    secret, state = position(setup, *where)
    consistent = state.candidate_words()[0]
    rewards = scorer.score([answer(word), answer(consistent)], state, secret)
    if not setup.lists.is_allowed(word):
        assert rewards.total[0] <= rewards.total[1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(positions)
def test_repeating_never_beats_a_new_consistent_guess(setup, scorer, where):
    secret, state = position(setup, *where)
    if not state.turns:
        return
    new = next(w for w in state.candidate_words() if w not in state.guesses)
    rewards = scorer.score([answer(state.guesses[0]), answer(new)], state, secret)
    assert rewards.parsed.failures[0] == "already_guessed"
    assert rewards.total[0] < rewards.total[1]


garbage = st.one_of(
    st.text(max_size=200),
    st.sampled_from(["", " ", "<guess></guess>", "<guess>crane</guess>", "<think></think>",
                     "<think>a</think><guess>crane</guess><guess>slate</guess>",
                     "<guess>crane</guess><guess>crane</guess>", "<think>x<guess>crane</guess></think>",
                     "<think>x</think><guess>crane</guess> trailing", "<think>x</think><guess>cranes</guess>",
                     "<think>x</think>crane", "<think>x</think><guess>cr4ne</guess>"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage)
def test_empty_garbage_or_several_tags_earn_no_format_credit(setup, scorer, text):
    rewards = scorer.score([text], setup.start, setup.lists.answers[0])
    strict = text.strip().startswith("<think>") and text.count("<guess>") == 1 and text.rstrip().endswith("</guess>")
    if not strict:
        assert rewards.component("format")[0] == 0.0
        assert rewards.total[0] == 0.0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(positions, st.lists(st.one_of(st.text(max_size=80),
                                      st.builds(answer, st.sampled_from(["crane", "zzzzz", "slate", "abbey"]),
                                                st.text(max_size=30))), min_size=1, max_size=6))
def test_rewards_stay_bounded_and_components_add_up(setup, scorer, where, texts):
    secret, state = position(setup, *where)
    rewards = scorer.score(texts, state, secret)
    low, high = scorer.weights.bounds
    assert np.all(np.isfinite(rewards.total))
    assert np.all(rewards.total >= low - 1e-9) and np.all(rewards.total <= high + 1e-9)
    np.testing.assert_allclose(rewards.components.sum(axis=1), rewards.total)
    assert rewards.components.shape == (len(texts), len(COMPONENTS))


def test_well_formed_guesses_can_earn_more_than_nothing(setup, scorer):
    """Not a negative-only reward: a valid, consistent guess earns a clearly positive total."""
    secret = setup.lists.answers[7]
    state = setup.start
    rewards = scorer.score([answer(w) for w in setup.lists.answers[:20]], state, secret)
    assert rewards.total.min() > 0.5 * (scorer.weights.format + scorer.weights.valid + scorer.weights.consistent)
