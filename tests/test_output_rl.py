"""`output-rl`: RL on three gains of a distilled model's output layer, at its own games' positions.

The two tests that build a distill run are slow (`.ci/run` runs them after the default suite)."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner

from cli import cli
from eval.endgame import answered_positions
from llm.adapter_files import save_adapter
from llm.loading import load_model
from rl.naming_head import naming_context, said_context
from sft.cot import truthful_answer
from solver.setup import load_setup
from sft.lora import AdapterSettings, attach_adapter, trainable_weights
from tiny_model import cached_tiny_model

DISTILL_ARGS = ["--positions", "4", "--validation-positions", "2", "--answer-positions", "2", "--anchor-positions",
                "2", "--epochs", "1", "--lr", "1e-2", "--quiet"]


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    """A tiny distill --part output run (a tokenizer with whole-word tokens, which are what the
    gains weigh), and the solver's games on training and validation secrets standing in for the
    distilled model's own (any eval JSON's one-candidate answers are positions)."""
    tiny_model_dir = cached_tiny_model(tmp_path_factory.getbasetemp() / "models", tokenizer="bpe-named")
    root = tmp_path_factory.mktemp("output-rl")
    model, _ = load_model(str(tiny_model_dir))
    mx.random.seed(0)
    config = attach_adapter(model, AdapterSettings(rank=2))
    adapter = save_adapter(root / "adapter", trainable_weights(model), config)
    runner = CliRunner()
    result = runner.invoke(cli, ["naming-head", "--model", str(tiny_model_dir), "--adapter", str(adapter),
                                 "--positions", "6", "--validation-positions", "3", "--epochs", "4", "--rank", "2",
                                 "--quiet"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["distill", "--model", str(tiny_model_dir), "--adapter", str(adapter), "--out",
                                 str(root / "distill"), *DISTILL_ARGS])
    assert result.exit_code == 0, result.output
    games = {}
    for split in ("untaught", "validation"):
        games[split] = root / f"{split}.json"
        result = runner.invoke(cli, ["eval", "--policy", "solver", "--split", split, "--games", "6", "--seed", "1",
                                     "--quiet", "--json", str(games[split])])
        assert result.exit_code == 0, result.output
    # the validation games get a model's text: a thought that misreads the clues before it names its word
    record = json.loads(games["validation"].read_text())
    for position, move in answered_positions(load_setup("answers"), record):
        move["text"] = misread(truthful_answer(position.state, move["guess"]))
    games["validation"].write_text(json.dumps(record))
    return root / "distill", games


def misread(answer: str) -> str:
    """A teacher's answer with a clue a model got wrong: what the naming state is read after changes."""
    return answer.replace("<think>", "<think>Pattern: QQQQQ. ", 1)


def run(source, out, *extra):
    folder, games = source
    return CliRunner().invoke(cli, ["output-rl", "--distilled", str(folder), "--out", str(out), "--own-games",
                                    str(games["untaught"]), "--own-validation", str(games["validation"]), "--quiet",
                                    *extra])


@pytest.mark.slow  # a naming head, a distill run and two solver evals: about a minute on 2 cores
def test_the_expected_reward_is_the_distilled_models_own_probabilities_and_rl_raises_it(distilled, tmp_path):
    """At the gains (1, 1, 0) a position's probability of naming the secret is the distilled
    model's own, token by token at the play temperature, through its real forward pass; steps
    raise the training positions' expected reward; the merged layer is the distilled one at the
    start and is what OUT/model holds."""
    from rl.distill import own_answers
    from rl.output_rl import OutputRLSettings, Source, expected, initial_gains, prepare
    from llm.word_steering import WordTokens

    out = tmp_path / "run"
    result = run(distilled, out, "--steps", "30", "--eval-every", "5", "--lr", "0.05", "--json",
                 str(tmp_path / "s.json"))
    assert result.exit_code == 0, result.output
    assert "output-rl (step" in result.output
    summary = json.loads((tmp_path / "s.json").read_text())
    curve = summary["curve"]
    assert summary["positions"]["own"] > 0 and summary["positions"]["own_validation"] > 0
    assert (curve[0]["beta"], curve[0]["alpha"], curve[0]["bias"]) == (1.0, 1.0, 0.0)
    assert summary["best"]["own_validation"]["win"] >= curve[0]["own_validation"]["win"]
    assert curve[0]["anchor_kl"] == pytest.approx(0.0, abs=1e-6) and curve[0]["anchor_same"] == 1.0
    load_model(str(out / "model"))  # a plain mlx-lm model folder
    assert "output-rl" in json.loads((out / "model" / "export.json").read_text())["output_layer"]
    assert json.loads((distilled[0] / "summary.json").read_text())["written"] == str(distilled[0] / "model")

    # exactness: the cached arrays' p(secret) at (1, 1, 0) against the distilled model run on its own text
    prepared = prepare(Source.of(str(distilled[0])), tmp_path / "again", (str(distilled[1]["untaught"]),),
                       (str(distilled[1]["validation"]),), OutputRLSettings(), False)
    _, p_secret = expected(initial_gains(), prepared.splits["own_validation"], prepared.secret_mask, 0.7)
    model, tokenizer = load_model(str(distilled[0] / "model"))
    vocabulary = WordTokens.of(tokenizer, load_setup("answers").lists.allowed)
    index = {w: i for i, w in enumerate(vocabulary.words)}
    moves = {p.key: move for p, move in own_answers((str(distilled[1]["validation"]),), "own_validation",
                                                    every_turn=True)}
    read = prepared.positions["own_validation"]
    assert len(read) == len(moves) and {len(p.state.candidates) > 1 for p in read} == {True, False}  # every answer
    for position, cached in list(zip(read, np.array(p_secret)))[:3] + list(zip(read, np.array(p_secret)))[-2:]:
        secret = vocabulary.sequences[index[position.secret]]
        move = moves[position.key]
        context = said_context(tokenizer, position, move["text"])
        assert context != said_context(tokenizer, position, truthful_answer(position.state, move["guess"]))
        context += list(secret[:-1])
        logits = model(mx.array([context]))[0, -len(secret):].astype(mx.float32) / 0.7
        direct = float(mx.prod(mx.softmax(logits, axis=-1)[mx.arange(len(secret)), mx.array(secret)]))
        assert cached == pytest.approx(direct, rel=2e-3, abs=1e-9)
    layer = prepared.layers.merged(initial_gains())
    assert np.allclose(np.array(layer), np.array(prepared.layers.distilled), atol=1e-6)


@pytest.mark.parametrize("architecture, tokenizer", [("llama", "bpe"), ("phi3", "sentencepiece-legacy")])
def test_said_contexts_are_the_tokens_the_model_wrote_up_to_its_word(tmp_path_factory, architecture, tokenizer):
    """A position's state is read after the model's own text, tokenized as it writes it in its answer:
    through ` Only` when it names one word, else up to the sentence that gives its guess's bits, nothing
    when it writes neither; the teacher's true thought gives the teacher's context."""
    from eval.splits import trainable
    from llm.format import messages, prompt_tokens
    from llm.naming_head import naming_tokens
    from rl.naming_head import one_candidate_positions
    from sft.data import tokenize

    setup = load_setup("answers")
    tiny = cached_tiny_model(tmp_path_factory.getbasetemp() / "models", architecture=architecture,
                             tokenizer=tokenizer)
    _, tok = load_model(str(tiny))
    position = one_candidate_positions(setup, trainable(setup.lists.answers)[:40], 1, 0)[0]
    secret = position.secret
    truthful = truthful_answer(position.state, secret)
    assert said_context(tok, position, truthful) == naming_context(tok, position)
    listed = truthful.replace(f"Only {secret} remains.", f"2 possible words: {secret}, crane. {secret}: 1.0 bits, "
                                                         "~1.0 words left; could be the answer.")
    prompt = prompt_tokens(tok, position.state, position.rejected)
    for text, ending in ((misread(truthful), naming_tokens(tok)), (listed, None)):
        context = said_context(tok, position, text)
        chat = tokenize(tok, [[*messages(position.state, position.rejected), {"role": "assistant", "content": text}]])
        tokens, offset = chat[0]
        assert offset == len(prompt) and context[:len(prompt)] == prompt and context == tokens[:len(context)]
        if ending:
            assert tuple(context[-len(ending):]) == ending
        else:  # up to the sentence that gives the guess's bits, after the list
            assert tok.decode(context[len(prompt):]).endswith(f"{secret}, crane.")
    assert said_context(tok, position, f"<think>I do not know.</think><guess> {secret}</guess>") is None


def test_the_expected_reward_sums_every_word_and_the_secrets_spelling_and_steps_raise_it():
    """Two positions by hand, three word tokens and one other: the first's secret is a whole word,
    the second's takes two tokens. The expected reward is the enumeration's, and Adam on the gains
    raises it by moving mass toward the secret list's word that wins."""
    import mlx.optimizers as optim

    from rl.output_rl import Split, expected, initial_gains

    own = np.array([[1.0, 0.5, 0.0], [0.2, 0.1, 0.3], [0.0, 0.0, 0.0]], np.float32)  # rows: p0, p1 first, p1 second
    spelled = np.array([[0.0, 1.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
    split = Split(own_logits=own, spelled=spelled, along=np.array([1.0, 1.0, 0.5], np.float32),
                  rest_lse=np.array([0.3, 0.8, 2.0], np.float32), target=np.array([0.0, 0.4, 1.5], np.float32),
                  target_word=np.array([1, -1, -1]), owners=np.array([0, 1, 1]), first=np.array([0, 1]),
                  rewards=np.array([[0.5, 3.0, 0.0], [0.5, 0.7, 0.0]], np.float32),
                  win=np.array([3.0, 3.0], np.float32), other=np.array([0.25, 0.35], np.float32),
                  several=np.array([0.0, 1.0], np.float32))
    secret_words = mx.array([0.0, 1.0, 1.0])
    temperature = 0.7
    reward, p_secret = expected(initial_gains(), split, secret_words, temperature)

    def by_hand(row: int) -> tuple[np.ndarray, float]:
        z = (own[row] + spelled[row]) / temperature
        lse = np.logaddexp(split.rest_lse[row], np.log(np.exp(z).sum()))
        return np.exp(z - lse), lse

    p0, _ = by_hand(0)
    p1, lse1 = by_hand(1)
    _, lse2 = by_hand(2)
    secret1 = np.exp(0.4 / temperature - lse1) * np.exp(1.5 / temperature - lse2)
    want0 = (p0 * split.rewards[0]).sum() + (1 - p0.sum()) * 0.25
    want1 = (p1 * split.rewards[1]).sum() + secret1 * 3.0 + (1 - p1.sum() - secret1) * 0.35
    assert np.allclose(np.array(reward), [want0, want1], rtol=1e-5)
    assert np.allclose(np.array(p_secret), [p0[1], secret1], rtol=1e-5)

    gains, optimizer = initial_gains(), optim.Adam(learning_rate=0.05)
    step = mx.value_and_grad(lambda g: -expected(g, split, secret_words, temperature)[0].mean())
    for _ in range(50):
        _, grads = step(gains)
        gains = optimizer.apply_gradients(grads, gains)
    after, _ = expected(gains, split, secret_words, temperature)
    assert float(after.mean()) > float(reward.mean()) + 0.05


def test_the_anchor_kl_is_the_whole_distributions_and_zero_at_the_distilled_layer():
    """At anchor rows every other token's logit is the same under both layers, so the KL over the
    whole vocabulary is the KL over the word tokens and one bucket holding the rest."""
    from rl.output_rl import Anchors, anchor_agreement, anchor_kl, initial_gains

    rng = np.random.default_rng(0)
    anchors = Anchors(own_logits=rng.normal(size=(4, 3)).astype(np.float32),
                      spelled=rng.normal(size=(4, 3)).astype(np.float32),
                      along=np.array([1.0, 0.2, 0.9, 0.0], np.float32),
                      rest_lse=np.array([1.0, 3.0, 0.5, 2.0], np.float32),
                      rest_max=np.array([0.5, 2.9, 0.1, 1.9], np.float32))
    secret_words = mx.array([1.0, 0.0, 1.0])
    assert float(anchor_kl(initial_gains(), anchors, secret_words, 0.7)) == pytest.approx(0.0, abs=1e-6)
    assert anchor_agreement(initial_gains(), anchors, secret_words, 0.7) == 1.0
    gains = {"beta": mx.array(1.5), "alpha": mx.array(0.5), "bias": mx.array(2.0)}

    def buckets(beta, alpha, bias, row):
        z = (beta * anchors.own_logits[row] + alpha * anchors.spelled[row]
             + bias * np.array([1.0, 0.0, 1.0]) * anchors.along[row]) / 0.7
        logits = np.r_[z, anchors.rest_lse[row]]
        return np.exp(logits - np.logaddexp.reduce(logits))

    want = np.mean([(buckets(1, 1, 0, r) * np.log(buckets(1, 1, 0, r) / buckets(1.5, 0.5, 2.0, r))).sum()
                    for r in range(4)])
    assert float(anchor_kl(gains, anchors, secret_words, 0.7)) == pytest.approx(want, rel=1e-4)


@pytest.mark.slow  # a naming head, a distill run and two solver evals: about a minute on 2 cores
def test_output_rl_mistakes_are_one_line_and_exit_2(distilled, tmp_path):
    folder, games = distilled
    runner = CliRunner()
    (tmp_path / "empty").mkdir()
    result = runner.invoke(cli, ["output-rl", "--distilled", str(tmp_path / "empty"), "--out", str(tmp_path / "o"),
                                 "--own-games", str(games["untaught"]), "--own-validation", str(games["validation"])])
    assert result.exit_code == 2 and "not a finished distill" in result.output
    result = run(distilled, folder / "inside")
    assert result.exit_code == 2 and "which this command reads" in result.output
    result = runner.invoke(cli, ["output-rl", "--distilled", str(folder), "--out", str(tmp_path / "o"),
                                 "--own-games", str(games["untaught"])])
    assert result.exit_code == 2 and "--own-validation" in result.output
    result = runner.invoke(cli, ["output-rl", "--distilled", str(folder), "--out", str(tmp_path / "o"),
                                 "--own-games", str(games["validation"]), "--own-validation", str(games["validation"])])
    assert result.exit_code == 2 and "not training words" in result.output
    result = run(distilled, tmp_path / "p", "--lr", "0")
    assert result.exit_code == 2
    for out in ("o", "p"):
        assert not (tmp_path / out / "model").exists()
    assert "Traceback" not in result.output
