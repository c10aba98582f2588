import random

import numpy as np
import pytest

from common.errors import UserError
from solver.feedback import feedback, parse_pattern
from solver.setup import load_setup
from solver.state import Constraints, Turn, state_from_history


@pytest.fixture(scope="module")
def setup():
    return load_setup("answers")


def _play(setup, secret, guesses):
    state = setup.start
    for g in guesses:
        state = state.play(g, feedback(g, secret))
    return state


def test_candidates_are_exactly_the_consistent_answers(setup):
    rng = random.Random(1)
    for _ in range(40):
        secret = rng.choice(setup.lists.answers)
        guesses = rng.sample(setup.lists.allowed, rng.randint(1, 3))
        state = _play(setup, secret, guesses)
        expected = [w for w in setup.lists.answers if all(feedback(g, w) == feedback(g, secret) for g in guesses)]
        assert state.candidate_words() == expected
        assert secret in expected


def test_constraints_agree_with_exact_consistency(setup):
    """The letter-by-letter knowledge admits exactly the words the feedback admits."""
    rng = random.Random(2)
    for _ in range(60):
        secret = rng.choice(setup.lists.answers)
        state = _play(setup, secret, rng.sample(setup.lists.allowed, rng.randint(1, 4)))
        known = state.constraints
        by_constraints = [w for w in setup.lists.answers if known.allows(w)]
        assert by_constraints == state.candidate_words()


def test_repeated_letter_constraints():
    # guess SPEED against ABIDE: one E (yellow), the second E grey -> exactly one E, not at 3 or 4.
    known = Constraints.from_turns([Turn("speed", feedback("speed", "abide"))])
    assert known.min_count["e"] == 1 and known.max_count["e"] == 1
    assert known.banned["e"] == {2, 3}
    assert known.min_count["d"] == 1 and known.banned["d"] == {4}
    assert known.absent == ["p", "s"]
    text = known.describe()
    assert "E is in the word exactly once, not at position 3 or 4." in text
    assert "Not in the word: P, S." in text


def test_green_and_yellow_same_letter():
    known = Constraints.from_turns([Turn("eerie", feedback("eerie", "sheen"))])
    # sheen has two Es: eerie shows E yellow, E yellow, R grey, I grey, E grey
    assert known.min_count["e"] == 2 and known.max_count["e"] == 2
    assert "E is in the word exactly twice, not at position 1, 2 or 5." in known.describe()


def test_greens_describe():
    known = Constraints.from_turns([Turn("crane", parse_pattern("22000"))])
    assert known.describe()[0] == "Known positions: CR___."


def test_history_errors(setup):
    with pytest.raises(UserError, match="no answers word fits"):
        state_from_history(setup.lists, setup.matrix, [("crane", parse_pattern("22220")), ("slate", 242)])
    with pytest.raises(UserError, match="already won"):
        state_from_history(setup.lists, setup.matrix, [("crane", 242), ("slate", 0)])
    with pytest.raises(UserError, match="not in the allowed"):
        state_from_history(setup.lists, setup.matrix, [("abcde", 0)])
    with pytest.raises(UserError, match="at most 6"):
        state_from_history(setup.lists, setup.matrix, [("crane", 0)] * 7)


def test_state_flags(setup):
    state = _play(setup, "crane", ["slate", "crane"])
    assert state.won and state.over and state.guesses_left == 4
    assert np.array_equal(state.candidate_words(), ["crane"])
