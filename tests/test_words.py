import hashlib

import numpy as np
import pytest

from common.errors import UserError
from solver.words import DEFAULT_ALLOWED, DEFAULT_ANSWERS, decode, default_word_lists, encode, load_word_lists


def test_shipped_lists_match_published_hashes():
    assert hashlib.sha256(DEFAULT_ANSWERS.read_bytes()).hexdigest() == (
        "f40e47975cf360ff9febe7d49c8e285054d8fa3fb9644cea575922060951d6ee")
    assert hashlib.sha256(DEFAULT_ALLOWED.read_bytes()).hexdigest() == (
        "feacc549249b5dcb43e2799fbbcda14ebc33d55904fb15d043779104e60c1579")


def test_default_lists_shape_and_codes():
    lists = default_word_lists()
    assert len(lists.answers) == 2315 and len(lists.allowed) == 12972
    assert set(lists.answers) <= set(lists.allowed)
    assert lists.answer_codes.shape == (2315, 5) and lists.answer_codes.dtype == np.uint8
    assert lists.answer_codes.max() <= 25
    assert decode(lists.answer_codes[0]) == lists.answers[0]
    assert lists.allowed[lists.answer_rows[100]] == lists.answers[100]
    assert decode(encode(["crane"])[0]) == "crane"


def test_user_lists_are_normalised(tmp_path):
    answers = tmp_path / "a.txt"
    allowed = tmp_path / "b.txt"
    answers.write_text("Crane\r\nslate\nslate\n\n")
    allowed.write_text("crane\nslate\ntrace\n")
    lists = load_word_lists(answers, allowed)
    assert lists.answers == ("crane", "slate")
    assert lists.allowed == ("crane", "slate", "trace")


@pytest.mark.parametrize("content, message", [
    ("crane\ncranes\n", ":2: 'cranes' is not a 5-letter a-z word"),
    ("crane\ncr4ne\n", ":2: 'cr4ne' is not a 5-letter a-z word"),
    ("", "the word list is empty"),
])
def test_bad_user_list_names_file_and_line(tmp_path, content, message):
    bad = tmp_path / "bad.txt"
    bad.write_text(content)
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        load_word_lists(bad, DEFAULT_ALLOWED)


def test_answers_must_be_allowed(tmp_path):
    answers = tmp_path / "a.txt"
    allowed = tmp_path / "b.txt"
    answers.write_text("crane\nzzzzz\n")
    allowed.write_text("crane\n")
    with pytest.raises(UserError, match="not in"):
        load_word_lists(answers, allowed)


def test_unreadable_list(tmp_path):
    with pytest.raises(UserError, match="cannot read word list"):
        load_word_lists(tmp_path / "missing.txt", DEFAULT_ALLOWED)
