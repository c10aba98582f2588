import random

import numpy as np
import pytest

from common.errors import UserError
from solver.feedback import (WIN, feedback, feedback_reference, parse_pattern, pattern_to_digits,
                             pattern_to_string)
from solver.matrix import build_pattern_matrix, pattern_matrix
from solver.words import default_word_lists, encode


@pytest.mark.parametrize("guess, secret, expected", [
    ("crane", "crane", "22222"),
    ("speed", "abide", "00101"),   # one E in the secret: the first E is yellow, the second grey
    ("speed", "erase", "10110"),   # erase has two Es: both yellow
    ("eerie", "sheen", "11000"),
    ("abbey", "babes", "11220"),
    ("lolly", "hello", "01220"),
    ("allee", "eagle", "11012"),
    ("geese", "tepee", "02102"),
    ("mamma", "maxim", "22100"),
    ("sassy", "essay", "11202"),
])
def test_tricky_repeated_letters(guess, secret, expected):
    reference = pattern_to_string(feedback_reference(guess, secret))
    assert pattern_to_string(feedback(guess, secret)) == reference
    assert reference == expected


def test_rule_greens_before_yellows():
    # The green E at position 4 of "sheen" is matched first, so only one E is left for the yellows.
    assert pattern_to_string(feedback("eerie", "sheen")) == "11000"
    # speed vs erase: S yellow, P grey, E yellow, E yellow (erase has two Es), D grey.
    assert pattern_to_string(feedback("speed", "erase")) == "10110"


def test_matches_reference_on_random_pairs():
    lists = default_word_lists()
    rng = random.Random(7)
    words = list(lists.allowed)
    pairs = [(rng.choice(words), rng.choice(words)) for _ in range(20000)]
    # Words sharing letters stress the repeated-letter rule.
    pairs += [(w, w[::-1]) for w in words[:2000]] + [(w, w[1:] + w[0]) for w in words[:2000]]
    for guess, secret in pairs:
        assert feedback(guess, secret) == feedback_reference(guess, secret), (guess, secret)


def test_matrix_matches_reference_sample():
    lists = default_word_lists()
    matrix = pattern_matrix(lists, "answers")
    assert matrix.shape == (12972, 2315) and matrix.dtype == np.uint8
    rng = np.random.default_rng(3)
    for g, s in zip(rng.integers(0, 12972, 3000), rng.integers(0, 2315, 3000)):
        assert matrix[g, s] == feedback_reference(lists.allowed[g], lists.answers[s])
    diagonal = matrix[lists.answer_rows, np.arange(2315)]
    assert (diagonal == WIN).all()


def test_matrix_cache_roundtrip_and_repair(isolated_cache):
    lists = default_word_lists()
    first = pattern_matrix(lists, "answers")
    files = list(isolated_cache.glob(f"patterns-{lists.fingerprint}-answers.npz"))
    assert len(files) == 1
    files[0].write_bytes(b"garbage")  # a damaged cache is rebuilt, not trusted
    again = pattern_matrix(lists, "answers")
    assert np.array_equal(first, again)


def test_parallel_builder_equals_small_reference():
    words = ["crane", "speed", "eerie", "sheen", "abbey"]
    codes = encode(words)
    matrix = build_pattern_matrix(codes, codes)
    for i, g in enumerate(words):
        for j, s in enumerate(words):
            assert matrix[i, j] == feedback_reference(g, s)


@pytest.mark.parametrize("text, digits", [("20100", [2, 0, 1, 0, 0]), ("gybbb", [2, 1, 0, 0, 0]),
                                          ("GY-x.", [2, 1, 0, 0, 0])])
def test_parse_pattern(text, digits):
    assert pattern_to_digits(parse_pattern(text)) == digits


@pytest.mark.parametrize("text", ["2010", "201000", "20130", "gyzbb"])
def test_parse_pattern_rejects(text):
    with pytest.raises(UserError):
        parse_pattern(text)
