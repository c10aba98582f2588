"""Batched sampling: the shared system-prompt and group caches, and prompts joining a running
batch, change no answer."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)
from mlx_lm import stream_generate
from mlx_lm.sample_utils import make_sampler

from llm.format import prompt_tokens
from llm.generation import GroupStream, SamplingSettings, _prefill, answer_seed, sample, shared_prefix_length
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


def test_caches_continued_from_a_short_shared_prefix_keep_their_own_prompts(tiny_model_dir: Path) -> None:  # noqa: F811
    """Prompts under mlx-lm's 256-position cache step, as the default model's are (89-token system
    prefix, 113-290-token prompts): each group's cache continues the prefix's and must not write
    into its buffer (a bug that once gave every group but the last another group's prompt tail)."""
    model, tokenizer = load_model(str(tiny_model_dir))
    prefix = list(range(3, 90))
    tails = [list(range(100, 140)), list(range(150, 170))]
    shared = _prefill(model, prefix)
    continued = [_prefill(model, tail, shared) for tail in tails]
    cut = _prefill(model, [], shared, 50)
    # A stream continues a new prompt from the longest prefix it knows: here the first group's prompt.
    stream = GroupStream(model, tokenizer, GREEDY, prefix=prefix)
    stream.submit(prefix + tails[0], 2)
    stream._start_pending()  # a submitted prompt is prefilled when the stream next generates
    later = prefix + tails[0][:30] + [7, 8]
    length, remembered = stream._prefix_cache(later)
    stream.close()
    assert length == len(prefix) + 30
    for cache, tokens in [*zip(continued, (prefix + t for t in tails)), (cut, prefix[:50]), (remembered, later[:length])]:
        for layer, own in zip(cache, _prefill(model, tokens)):
            keys, _, offset = layer.state
            own_keys, _, own_offset = own.state
            assert offset == own_offset == len(tokens)
            assert mx.allclose(keys[..., :offset, :], own_keys[..., :offset, :], atol=1e-5).item()


def test_group_members_sample_independently(tiny_model_dir: Path) -> None:  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    mx.random.seed(0)
    (group,) = sample(model, tokenizer, _prompts(tokenizer)[1:2], 6, SamplingSettings(temperature=1.0, max_tokens=12))
    assert len({c.tokens for c in group}) > 1


def test_a_sampled_answer_is_the_same_whatever_shares_its_batch(tiny_model_dir: Path) -> None:  # noqa: F811
    """Each answer draws from its own keys: alone, or joining a batch of others at another
    moment, an answer given the same seed samples the same tokens; another seed, others. Prompts
    prefilled one a core (`spread`, on a CPU of several cores) or by mlx-lm in batches: the same."""
    model, tokenizer = load_model(str(tiny_model_dir))
    prompts = _prompts(tokenizer)
    warm = SamplingSettings(temperature=1.0, max_tokens=12)

    def answers(order: list[int], batch_size: int, spread: bool = True) -> dict[int, tuple[int, ...]]:
        stream = GroupStream(model, tokenizer, warm, batch_size=batch_size, prefix=prompts[0][:50], spread=spread)
        asked = {stream.submit(prompts[i % 3], 1, seed=answer_seed(5, i)): i for i in order}
        got = {}
        while stream:
            for group, (completion,) in stream.finished():
                got[asked[group]] = completion.tokens
        return got

    alone = {i: answers([i], 1)[i] for i in range(6)}
    assert answers([5, 4, 3, 2, 1, 0], 6) == alone
    assert answers(list(range(6)), 2) == alone
    assert answers(list(range(6)), 6, spread=False) == alone
    assert len({alone[0], alone[3]}) == 2  # the same prompt, another seed
    assert len({answer_seed(5, 0), answer_seed(5, 1), answer_seed(0, 5), answer_seed(5, 0, 0)}) == 4


def test_prompts_joining_a_running_batch_get_the_answers_they_would_alone(tiny_model_dir: Path) -> None:  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    prompts = _prompts(tokenizer)
    expected = [_one_by_one(model, tokenizer, p) for p in prompts]
    # The stream's prefix reaches past what later prompts share: it is cut back for them.
    stream = GroupStream(model, tokenizer, GREEDY, batch_size=4, prefix=prompts[1][:-1])
    asked = {stream.submit(prompts[1], 2): 1}
    got: dict[int, list] = {}
    while stream:
        finished = stream.finished()
        assert finished  # a call returns once a group is complete
        for group, completions in finished:
            got[asked.pop(group)] = [c.tokens for c in completions]
            if len(got) == 1:  # submitted while nothing else is running, and while the last one runs
                asked[stream.submit(prompts[0], 3)] = 0
                asked[stream.submit(prompts[2], 1)] = 2
    stream.close()
    assert got == {0: [expected[0]] * 3, 1: [expected[1]] * 2, 2: [expected[2]]}
    assert stream.passes.answer_tokens == sum(len(t) for answers in got.values() for t in answers)
    assert stream.finished() == []


def test_an_answer_sampler_draws_greedy_nucleus_and_seeded_tokens() -> None:
    """Temperature 0 takes the top token; top-p keeps only the nucleus; one seed draws the same
    tokens call by call, another seed other tokens, and the draws follow the probabilities."""
    from llm.generation import AnswerSampler

    logprobs = mx.log(mx.array([[0.6, 0.3, 0.1]]))
    assert AnswerSampler(SamplingSettings(temperature=0.0), 1)(logprobs).item() == 0
    nucleus = AnswerSampler(SamplingSettings(temperature=1.0, top_p=0.5, max_tokens=50), 1)
    assert {nucleus(logprobs).item() for _ in range(50)} == {0}

    def draws(seed: int) -> list[int]:
        sampler = AnswerSampler(SamplingSettings(temperature=1.0, max_tokens=400), seed)
        return [sampler(logprobs).item() for _ in range(400)]

    first = draws(7)
    assert draws(7) == first and draws(8) != first
    assert abs(first.count(0) / 400 - 0.6) < 0.08 and abs(first.count(2) / 400 - 0.1) < 0.05
