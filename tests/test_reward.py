"""The reward kernel: its components on hand-made answers, and the properties RL relies on.

Reward hacking seen in earlier attempts (NOTES.md): invalid words inside <guess>, empty
or garbage output, several tags, repeating a guess. None of them may pay, and none may
pay more than another: every answer the game cannot play scores the same floor.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.errors import UserError
from llm.format import format_answer, parse_answer
from rl.reward import COMPONENTS, RewardScorer, RewardWeights
from sft.cot import truthful_answer
from solver.entropy import score_guesses
from solver.feedback import feedback, pattern_to_string
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
    opener = next(w for w in setup.lists.answers if len(played(setup, secret, w).candidates) >= 3)
    state = played(setup, secret, opener)
    candidate = next(w for w in state.candidate_words() if w != secret)
    texts = [answer(secret), answer(candidate), answer(opener), answer("zzzzz"), "no tags at all", "",
             truthful_answer(state, candidate)]
    rewards = scorer.score(texts, state, secret)
    parts = {name: rewards.component(name) for name in COMPONENTS}
    w = scorer.weights
    # The secret: every credit but the thought ("thinking" is no true sentence), and a win on
    # guess 2 of 6 earns 4/5 of the speed bonus.
    assert parts["format"][0] == w.format and parts["valid"][0] == w.valid and parts["consistent"][0] == w.consistent
    assert parts["possible"][0] == w.possible and parts["thought"][0] == 0
    assert parts["win"][0] == pytest.approx(w.win + w.speed * 4 / 5)
    # Another candidate: consistent and possible, no win.
    assert parts["consistent"][1] == w.consistent and parts["possible"][1] == w.possible and parts["win"][1] == 0
    # Replaying the opener, a made-up word, no tags, nothing: all the same floor, 0.
    assert list(rewards.total[2:6]) == [0.0] * 4 and not rewards.components[2:6].any()
    assert rewards.parsed.failures[:6] == (None, None, "already_guessed", "not_allowed", "no_tags", "no_tags")
    # The same candidate with a true thought: the thought's full credit on top.
    assert parts["thought"][6] == w.thought
    assert rewards.total[6] == pytest.approx(rewards.total[1] + w.thought)
    np.testing.assert_allclose(rewards.components.sum(axis=1), rewards.total)


def test_consistent_and_possible_are_separate_credits(setup, scorer):
    """A word that fits the feedback but is not a remaining answer earns `consistent`, not `possible`."""
    for secret in setup.lists.answers[:60]:
        state = played(setup, secret, setup.lists.answers[200])
        fitting = [w for w in setup.lists.allowed if state.constraints.allows(w) and w not in state.candidate_words()]
        if fitting:
            break
    rewards = scorer.score([answer(fitting[0]), answer(state.candidate_words()[0])], state, secret)
    assert rewards.component("consistent").tolist() == [scorer.weights.consistent] * 2
    assert rewards.component("possible").tolist() == [0.0, scorer.weights.possible]


def test_fit_is_the_share_of_earlier_tiles_the_guess_would_have_given(setup):
    """The graded `consistent`: 1 for a word that fits every clue, the share of the 5 x turns
    feedback tiles it reproduces otherwise, counted with the rules' own feedback."""
    scorer = RewardScorer(setup, RewardWeights(fit=2.0))
    secret = setup.lists.answers[40]
    state = played(setup, secret, setup.lists.answers[5], setup.lists.answers[90])
    words = [w for w in setup.lists.allowed[:400] if w not in state.guesses][:60]
    rewards = scorer.score([answer(w) for w in words], state, secret)
    for word, fit, consistent in zip(words, rewards.component("fit"), rewards.component("consistent")):
        shared = sum(a == b for t in state.turns
                     for a, b in zip(pattern_to_string(feedback(t.guess, word)), pattern_to_string(t.pattern)))
        assert fit == pytest.approx(2.0 * shared / 10)
        assert (consistent > 0) == (shared == 10) == state.constraints.allows(word)
    assert len(set(rewards.component("fit").round(6))) > 2  # graded, not 0/1
    assert RewardScorer(setup).score([answer(words[0])], state, secret).component("fit").tolist() == [0.0]


def test_a_word_refused_earlier_at_this_turn_scores_the_floor_again(setup, scorer):
    """The position has not changed since the refusal, so neither has the reason."""
    secret = setup.lists.answers[3]
    state = played(setup, secret, setup.lists.answers[50])
    for refused in ("zzzzz", "tone", setup.lists.answers[50]):
        first = scorer.score([answer(refused)], state, secret)
        again = scorer.score([answer(refused, "I said it before.")], state, secret)
        assert first.total.tolist() == again.total.tolist() == [0.0]
        assert again.parsed.failures == first.parsed.failures != (None,)


def test_thought_credit_is_the_share_of_true_sentences(setup, scorer):
    secret = setup.lists.answers[21]
    state = played(setup, secret, setup.lists.answers[7])
    guess = state.candidate_words()[0]
    true = truthful_answer(state, guess)
    sentences = parse_answer(true).thought.split(". ")
    false_count = true.replace(f"{len(state.candidates)} possible", f"{len(state.candidates) + 5} possible")
    rewards = scorer.score([true, false_count, answer(guess, "Only zzzzz remains.")], state, secret)
    w = scorer.weights.thought
    assert rewards.component("thought")[0] == w
    assert rewards.component("thought")[1] == pytest.approx(w * (len(sentences) - 1) / len(sentences))
    assert rewards.component("thought")[2] == 0.0


def test_weights_that_let_a_non_win_beat_a_win_are_refused():
    with pytest.raises(UserError, match="must exceed"):
        RewardWeights(win=1.0, info=1.0, thought=0.5).check()
    with pytest.raises(UserError, match="format"):
        RewardWeights(format=0.0, valid=0.0).check()


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
    weights = RewardWeights(format=1.0, valid=0.0, consistent=2.0, possible=0.5, info=0.0, thought=0.0, win=5.0,
                            speed=0.0)
    scorer = RewardScorer(setup, weights)
    secret = setup.lists.answers[3]
    rewards = scorer.score([answer(secret)], setup.start, secret)
    assert rewards.total[0] == pytest.approx(1.0 + 2.0 + 0.5 + 5.0)
    assert weights.bounds == (0.0, 8.5)


def test_tied_groups_are_flagged(setup, scorer):
    assert scorer.score(["garbage", "more garbage"], setup.start).tied()
    assert not scorer.score(["garbage", answer(setup.lists.answers[0])], setup.start).tied()
    close = scorer.score([answer(setup.lists.answers[0]), answer(setup.lists.answers[1])], setup.start)
    spread = float(np.ptp(close.total))
    assert close.tied(spread + 1e-6) and not close.tied(spread / 2)


# ---- properties -------------------------------------------------------------------------

positions = st.tuples(st.integers(0, 299), st.lists(st.integers(0, 299), min_size=0, max_size=4))


def position(setup, secret_index, guess_indices):
    secret = setup.lists.answers[secret_index]
    guesses = [setup.lists.answers[i] for i in dict.fromkeys(guess_indices) if setup.lists.answers[i] != secret]
    return secret, played(setup, secret, *guesses)


unplayable = st.one_of(
    st.text(max_size=60),
    st.builds(answer, st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=5, max_size=5), st.text(max_size=30)),
    st.builds(answer, st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(positions, st.lists(unplayable, min_size=1, max_size=4), st.booleans())
def test_unplayable_answers_all_score_the_floor_below_every_playable_one(setup, scorer, where, texts, repeat):
    """No unplayable answer outscores another, and none outscores any playable answer."""
    secret, state = position(setup, *where)
    if repeat and state.turns:
        texts = texts + [answer(state.guesses[0], "Only it remains.")]
    playable_words = [w for w in setup.lists.allowed[::97] if w not in state.guesses]
    rewards = scorer.score(texts + [answer(w, "x") for w in playable_words], state, secret)
    is_playable = rewards.parsed.playable
    assert len(set(rewards.total[~is_playable].tolist())) <= 1
    if (~is_playable).any() and is_playable.any():
        assert rewards.total[~is_playable].max() < rewards.total[is_playable].min()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(positions, st.integers(0, 1468), st.booleans())
def test_a_win_outscores_everything(setup, scorer, where, other, true_thought):
    """Even the best non-winning move with a perfectly true thought scores below a bare win."""
    secret, state = position(setup, *where)
    if state.over:
        return
    word = setup.lists.allowed[other]
    best = setup.lists.allowed[int(np.argmax(score_guesses(setup.matrix, np.arange(len(setup.lists.allowed)),
                                                           state.candidates)[0]))]
    texts = [answer(secret, "no reasoning")]
    for guess in (word, best):
        if guess != secret and guess not in state.guesses:
            texts.append(truthful_answer(state, guess) if true_thought else answer(guess))
    rewards = scorer.score(texts, state, secret)
    assert rewards.total[0] > rewards.total[1:].max(initial=-1.0)


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
