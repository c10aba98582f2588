"""`--constrain-guess`: inside the guess tag only allowed, unplayed words can be written
(a real tiny model generating, its tokens steered by the constraint)."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner

from cli import cli
from llm.format import parse_answer, prompt_tokens
from llm.generation import SamplingSettings, sample
from llm.guess_constraint import GuessVocabulary
from llm.loading import load_model
from llm_fixtures import tiny_model_dir  # noqa: F401
from solver.setup import load_setup

WORDS = ("crane", "crate", "slate", "trace", "zesty")


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):  # noqa: F811
    return load_model(str(tiny_model_dir))


def allowed_after(processor, tokenizer, text: str) -> set[int]:
    """Tokens the processor leaves open after `text` has been generated."""
    vocab = 1 + max(tokenizer.vocab.values())
    tokens = [0] + tokenizer.encode(text, add_special_tokens=False)  # the first call sees a prompt token
    logits = mx.zeros((1, vocab))
    for i in range(len(tokens)):
        out = processor(mx.array(tokens[: i + 1]), logits)
    return set(np.flatnonzero(np.isfinite(np.array(out[0]))).tolist())


def test_only_listed_words_can_be_spelled(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    vocabulary = GuessVocabulary(tokenizer, WORDS)
    free = allowed_after(vocabulary.processor(tokenizer, set()), tokenizer, "<think>x</think>")
    assert len(free) > 300  # before the tag: no constraint
    open_tag = "<think>x</think><guess>"
    for word in WORDS:
        spelled = tokenizer.encode(f" {word}</guess>", add_special_tokens=False)
        for i in range(len(spelled)):
            text = open_tag + tokenizer.decode(spelled[:i])
            allowed = allowed_after(vocabulary.processor(tokenizer, set()), tokenizer, text)
            assert spelled[i] in allowed and len(allowed) <= len(WORDS)
    first = {tokenizer.encode(f" {w}</guess>", add_special_tokens=False)[0] for w in WORDS}
    assert allowed_after(vocabulary.processor(tokenizer, set()), tokenizer, open_tag) == first


def test_played_and_refused_words_are_closed(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    vocabulary = GuessVocabulary(tokenizer, WORDS)
    banned = {"crane", "crate", "slate", "trace"}
    only = tokenizer.encode(" zesty</guess>", add_special_tokens=False)
    allowed = allowed_after(vocabulary.processor(tokenizer, banned), tokenizer, "<think>x</think><guess>")
    assert allowed == {only[0]}


def test_generated_guesses_are_playable(model_and_tokenizer):
    """The random model is forced through `<think>x</think><guess>`; from there the
    constraint alone decides what it can write: always a listed word not yet played."""
    model, tokenizer = model_and_tokenizer
    setup = load_setup("answers")
    vocabulary = GuessVocabulary(tokenizer, setup.lists.allowed)
    state = setup.start.play("crane", int(setup.matrix[setup.lists.index("crane"), 0]))
    script = tokenizer.encode("<think>x</think><guess>", add_special_tokens=False)

    def forced(constraint):
        step = {"n": 0}

        def processor(context, logits):
            logits = constraint(context, logits)
            if step["n"] < len(script):
                mask = np.full(logits.shape[-1], -np.inf, dtype=np.float32)
                mask[script[step["n"]]] = 0.0
                logits = logits + mx.array(mask)
            step["n"] += 1
            return logits
        return processor

    mx.random.seed(0)
    prompts = [prompt_tokens(tokenizer, state)] * 6
    processors = [forced(vocabulary.processor(tokenizer, {"crane"})) for _ in prompts]
    completions = sample(model, tokenizer, prompts, 1, SamplingSettings(temperature=1.0, max_tokens=60),
                         processors=processors)
    for (completion,) in completions:
        parsed = parse_answer(completion.text, setup.lists, state.guesses)
        assert parsed.failure is None and parsed.guess != "crane", completion.text


def test_eval_flag_is_for_models_only():
    result = CliRunner().invoke(cli, ["eval", "--constrain-guess", "--games", "1"])
    assert result.exit_code == 2 and "--constrain-guess applies to a model" in result.output


def test_eval_says_the_guess_was_constrained(tiny_model_dir, tmp_path):  # noqa: F811
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(cli, ["eval", "--model", str(tiny_model_dir), "--games", "1", "--max-tokens", "8",
                                      "--constrain-guess", "--quiet", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["guess_constrained"] is True and data["policy"].endswith("(guess constrained)")
    shown = " ".join(result.output.split())  # the table wraps a long model path at any space
    assert "(guess constrained)" in shown  # shown, not eaten as rich markup
