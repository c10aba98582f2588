"""The prompt/answer format: rendering of states and the strict parser."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm import format as fmt
from solver.feedback import feedback
from solver.setup import load_setup


@pytest.fixture(scope="module")
def setup():
    return load_setup("answers")


def _state(setup, secret, guesses):
    state = setup.start
    for g in guesses:
        state = state.play(g, feedback(g, secret))
    return state


def test_first_turn_prompt(setup):
    text = fmt.render_state(setup.start)
    assert text == "This is the first guess. You have 6 guesses left. What is your guess?"
    msgs = fmt.messages(setup.start)
    assert [m["role"] for m in msgs] == ["system", "user"] and "<guess>" in msgs[0]["content"]


def test_repeated_letters_render_in_plain_english(setup):
    # SPEED against ABIDE: the first E is yellow, the second grey; D is yellow.
    state = _state(setup, "abide", ["speed"])
    text = fmt.render_state(state)
    assert "Guess 1: speed -> S grey, P grey, E yellow, E grey, D yellow" in text
    assert "- E is in the word exactly once, not at position 3 or 4." in text
    assert "- D is in the word at least once, not at position 5." in text
    assert "- Not in the word: P, S." in text
    assert text.endswith("You have 5 guesses left. What is your next guess?")


def test_green_and_double_letters(setup):
    state = _state(setup, "sheen", ["eerie", "sheep"])
    text = fmt.render_state(state)
    assert "Known positions: SHEE_." in text
    assert "E is in the word exactly twice, at position 3 or 4, not at position 1, 2 or 5." in text
    assert "You have 4 guesses left." in text


def test_one_guess_left_singular(setup):
    state = _state(setup, "crane", ["salet", "brick", "dough", "fjord", "nymph"])
    assert fmt.render_state(state).endswith("You have 1 guess left. What is your next guess?")


@pytest.mark.parametrize("text, guess, failure", [
    ("<think>ok</think><guess>crane</guess>", "crane", None),
    ("\n<think>multi\nline</think>\n<guess> CRANE </guess>\n", "crane", None),
    ("", None, fmt.NO_TAGS),
    ("crane", None, fmt.NO_TAGS),
    ("<think>x</think><guess>crane", None, fmt.NO_TAGS),
    ("<guess>crane</guess>", "crane", fmt.MALFORMED),  # no thinking
    ("<think>x</think><guess>crane</guess> and more", "crane", fmt.MALFORMED),
    ("<think>x<guess>crane</guess></think>", "crane", fmt.MALFORMED),
    ("<think>a</think><think>b</think><guess>crane</guess>", "crane", fmt.MALFORMED),
    ("<think>x</think><guess>crane</guess><guess>slate</guess>", None, fmt.SEVERAL_GUESSES),
    ("<think>x</think><guess>crane slate</guess>", "crane slate", fmt.NOT_FIVE_LETTERS),
    ("<think>x</think><guess>cranes</guess>", "cranes", fmt.NOT_FIVE_LETTERS),
    ("<think>x</think><guess>cr4ne</guess>", "cr4ne", fmt.NOT_FIVE_LETTERS),
    ("<think>x</think><guess>crâne</guess>", "crâne", fmt.NOT_FIVE_LETTERS),
    ("<think>x</think><guess></guess>", None, fmt.NOT_FIVE_LETTERS),
    ("<think>x</think><guess>zzzzz</guess>", "zzzzz", fmt.NOT_ALLOWED),
    ("<think>x</think><guess>salet</guess>", "salet", fmt.ALREADY_GUESSED),
])
def test_parser(setup, text, guess, failure):
    parsed = fmt.parse_answer(text, setup.lists, ["salet"])
    assert (parsed.guess, parsed.failure) == (guess, failure)
    assert parsed.format_ok == (failure not in fmt.FORMAT_FAILURES)


def test_format_answer_roundtrip(setup):
    text = fmt.format_answer("Only crane fits.", "crane")
    assert text.endswith(" crane fits.</think><guess> crane</guess>")  # the thought's own tokens, space included
    assert fmt.parse_answer(text, setup.lists) == fmt.Parsed("crane", None, "Only crane fits.")
    assert fmt.parse_answer(text.replace(" crane</guess>", "CRANE</guess>"), setup.lists).guess == "crane"


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(list("<>/ abcdeghinkrstu\n") + ["<think>", "</think>", "<guess>", "</guess>",
                                                                 "crane"]), max_size=30).map("".join))
def test_parser_never_crashes_and_only_accepts_strict_answers(text):
    parsed = fmt.parse_answer(text)
    if parsed.ok:
        assert text.count("<guess>") == 1 and text.count("</guess>") == 1
        assert text.strip().startswith("<think>") and text.strip().endswith("</guess>")
        assert len(parsed.guess) == 5 and parsed.guess.isalpha()


def test_prompt_goes_through_chat_template(tmp_path_factory, setup):
    from mlx_lm import load

    from tiny_model import cached_tiny_model

    _, tokenizer = load(str(cached_tiny_model(tmp_path_factory.mktemp("tiny"))))
    ids = fmt.prompt_tokens(tokenizer, _state(setup, "abide", ["speed"]))
    text = tokenizer.decode(ids)
    assert "<|im_start|>system" in text and "speed -> S grey" in text
    assert text.rstrip().endswith("<|im_start|>assistant")
