"""Batched sampling: the shared system-prompt and group caches change no answer."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)
from mlx_lm import stream_generate
from mlx_lm.sample_utils import make_sampler

from llm.format import prompt_tokens
from llm.generation import SamplingSettings, sample, shared_prefix_length
from llm.loading import load_model
from solver.feedback import feedback
from solver.setup import load_setup

GREEDY = SamplingSettings(temperature=0.0, max_tokens=12)


def _prompts(tokenizer) -> list[list[int]]:
    setup = load_setup("answers", None, None)
    states = [setup.start, setup.start.play("crane", feedback("crane", "abide"))]
    states.append(states[1].play("spilt", feedback("spilt", "abide")))
    return [prompt_tokens(tokenizer, state) for state in states]


def _one_by_one(model, tokenizer, prompt: list[int]) -> tuple[int, ...]:
    """Greedy tokens from mlx-lm's own single-sequence generator, stopping where `sample` stops."""
    tokens = []
    for step in stream_generate(model, tokenizer, prompt, max_tokens=GREEDY.max_tokens,
                                sampler=make_sampler(temp=0.0)):
        if step.token in tokenizer.eos_token_ids:
            break
        tokens.append(step.token)
        if "</guess>" in tokenizer.decode(tokens):
            break
    return tuple(tokens)


def test_shared_prefix_is_the_system_message(tiny_model_dir: Path) -> None:  # noqa: F811
    _, tokenizer = load_model(str(tiny_model_dir))
    prompts = _prompts(tokenizer)
    start = shared_prefix_length(prompts)
    assert 50 < start < min(len(p) for p in prompts)
    assert shared_prefix_length([prompts[0]]) == len(prompts[0]) - 1
    assert shared_prefix_length([[1, 2, 3], [1, 2]]) == 1  # each keeps a token of its own


def test_batched_greedy_answers_match_one_by_one(tiny_model_dir: Path) -> None:  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    prompts = _prompts(tokenizer)
    expected = [_one_by_one(model, tokenizer, p) for p in prompts]
    singles = sample(model, tokenizer, prompts, 1, GREEDY)
    assert [group[0].tokens for group in singles] == expected
    groups = sample(model, tokenizer, prompts, 3, GREEDY)
    assert [[c.tokens for c in group] for group in groups] == [[e] * 3 for e in expected]
    assert sample(model, tokenizer, [], 2, GREEDY) == []


def test_group_members_sample_independently(tiny_model_dir: Path) -> None:  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    mx.random.seed(0)
    (group,) = sample(model, tokenizer, _prompts(tokenizer)[1:2], 6, SamplingSettings(temperature=1.0, max_tokens=12))
    assert len({c.tokens for c in group}) > 1
