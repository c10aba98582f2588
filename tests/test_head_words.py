"""A naming head folded into the model as word tokens (llm/head_words.py, `export --fold-head`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir, write_lora_adapter  # noqa: F401
from tiny_model import cached_tiny_model

from cli import cli
from common.errors import UserError
from llm.format import prompt_tokens
from llm.head_words import GATE_DEPTH, fold_figures, score_rows, word_inputs, word_rows, write_word_tokens
from llm.loading import load_model
from llm.naming_head import HEAD_FILE, NamingHead
from llm.word_steering import WordTokens, head_scorer
from sft.export import PROMPT_DOC, RECORD, example_game
from solver.setup import load_setup

WORDS = ("crane", "slate", "jumpy", "vowel", "cigar")


def random_head(hidden: int, seed: int = 0, bias: float = 0.7) -> NamingHead:
    rng = np.random.default_rng(seed)
    return NamingHead(rng.normal(size=(4, hidden)).astype(np.float32), rng.normal(size=(hidden, 4)).astype(np.float32),
                      rng.normal(size=(156, hidden)).astype(np.float32), 0.01,
                      np.array([0.8, 1.5, 0.3], np.float32), bias)


def test_a_word_row_and_its_constant_score_the_word_as_the_head_does(tiny_model_dir) -> None:  # noqa: F811
    """The head's scores are linear in the state: one row and one constant a word give them exactly,
    gains and the bias toward the secret list included."""
    model, tokenizer = load_model(str(tiny_model_dir))
    vocabulary = WordTokens.of(tokenizer, list(WORDS))
    head = random_head(model.args.hidden_size)
    states = np.random.default_rng(1).normal(size=(6, model.args.hidden_size)).astype(np.float32)
    rows, constants = score_rows(model, head, vocabulary, ("crane", "cigar"))
    expected = np.array(head_scorer(model, head, vocabulary, ("crane", "cigar"))(mx.array(states)))
    assert np.allclose(states @ rows.T + constants, expected, atol=1e-3)
    assert constants[0] - constants[1] == pytest.approx(0.7 + vocabulary.offsets[0] - vocabulary.offsets[1])


def test_the_words_are_open_at_the_naming_states_and_shut_at_every_other_token(tiny_model_dir) -> None:  # noqa: F811
    """Where the head acts the word tokens score as the head scores them, up to one shift a state shares
    among all words (the gate's; the words' constants ride on the state); at the other answer tokens they
    sit about GATE_DEPTH lower."""
    model, tokenizer = load_model(str(tiny_model_dir))
    vocabulary = WordTokens.of(tokenizer, list(WORDS))
    hidden = model.args.hidden_size
    rng = np.random.default_rng(2)
    base = rng.normal(size=hidden) * 4
    naming = base + rng.normal(size=(60, hidden)) * 0.1
    other = base + rng.normal(size=hidden) * 4 + rng.normal(size=(400, hidden)) * 0.1  # states in another place
    head = random_head(hidden)
    rows = word_rows(model, head, vocabulary, naming, other)
    figures = fold_figures(model, head, vocabulary, rows, naming[:20], other[:100])
    scores, constants = score_rows(model, head, vocabulary)
    at_naming = naming @ rows.output.T - (naming @ scores.T + constants)
    assert np.ptp(at_naming, axis=1).max() < 0.5
    assert np.mean(other @ rows.output.T - other @ scores.T) < at_naming.mean() - 0.9 * GATE_DEPTH
    assert figures["same_first_word"] > 0.9 and figures["naming_states"] == 20 and figures["other_states"] == 100
    # a longer word reads as its score row's direction at the embeddings' mean length
    longer = np.array([len(s) > 1 for s in vocabulary.sequences])
    embeddings = np.array(model.model.embed_tokens.weight)
    lengths = np.linalg.norm(rows.inputs[longer], axis=1)
    assert longer.any() and np.allclose(lengths, np.linalg.norm(embeddings, axis=1).mean(), rtol=1e-4)
    assert np.allclose(np.sum(rows.inputs[longer] * scores[longer], axis=1),
                       lengths * np.linalg.norm(scores[longer], axis=1), rtol=1e-2)


@pytest.mark.slow  # 71 s on 2 cores (400 teacher answers read)
def test_export_fold_head_writes_a_model_whose_vocabulary_names_every_allowed_word(
        tmp_path, tiny_model_dir) -> None:  # noqa: F811
    """The folded folder is a plain mlx-lm model: one token per allowed word after its own tokens,
    decoding to the word after a space, which no text is encoded with (the prompts' tokens are as
    before), and each word's output row is the fold's."""
    import mlx_lm

    adapter = tmp_path / "adapter"
    write_lora_adapter(tiny_model_dir, adapter)
    model, tokenizer = load_model(str(tiny_model_dir))
    random_head(model.args.hidden_size).save(adapter / HEAD_FILE)
    out = tmp_path / "folded"
    result = CliRunner().invoke(cli, ["export", "--model", str(tiny_model_dir), "--adapter", str(adapter), "--out",
                                      str(out), "--fold-head", "--quiet", "--json", str(tmp_path / "x.json")])
    assert result.exit_code == 0, result.output + str(result.exception)
    assert "naming head folded in as 12972 word tokens; at held-out positions" in result.stdout
    assert "does not travel" not in result.stderr
    record = json.loads((out / RECORD).read_text())
    words = load_setup("answers").lists.allowed
    size = model.model.embed_tokens.weight.shape[0]
    assert record["head_words"]["words"] == len(words) and record["naming_head_left_behind"] is None
    assert "folded in" in (out / PROMPT_DOC).read_text()
    folded, folded_tokenizer = mlx_lm.load(str(out))
    assert folded.lm_head.weight.shape[0] == folded.model.embed_tokens.weight.shape[0] == size + len(words)
    assert [folded_tokenizer.decode([size + k]) for k in (0, 1, len(words) - 1)] == \
           [" " + words[0], " " + words[1], " " + words[-1]]
    for position in example_game():
        assert prompt_tokens(folded_tokenizer, position.state) == prompt_tokens(tokenizer, position.state)
    original = np.array(model.model.embed_tokens.weight)
    assert np.array_equal(np.array(folded.model.embed_tokens.weight)[:size], original)


def test_fold_head_needs_a_head_and_a_byte_level_tokenizer(tmp_path, tiny_model_dir) -> None:  # noqa: F811
    adapter = tmp_path / "adapter"
    write_lora_adapter(tiny_model_dir, adapter)
    out = tmp_path / "folded"
    result = CliRunner().invoke(cli, ["export", "--model", str(tiny_model_dir), "--adapter", str(adapter), "--out",
                                      str(out), "--fold-head", "--quiet"])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr.count("\n") == 1 and "no naming head beside --adapter" in result.stderr
    spm = cached_tiny_model(tmp_path / "models", tokenizer="sentencepiece")
    folder = tmp_path / "spm"
    shutil.copytree(spm, folder)
    model, _ = load_model(str(folder))
    rows = word_rows(model, random_head(model.args.hidden_size), WordTokens.of(load_model(str(folder))[1],
                                                                                  list(WORDS)),
                     *(np.random.default_rng(3).normal(size=(n, model.args.hidden_size)) for n in (8, 40)))
    with pytest.raises(UserError, match="no byte-level BPE tokenizer.json"):
        write_word_tokens(folder, rows, model)
    assert Path(folder / "config.json").read_text() == Path(spm / "config.json").read_text()


def test_a_word_the_tokenizer_writes_whole_reads_as_its_own_token(tmp_path) -> None:
    """A one-token word's word token has that token's input embedding: what follows reads as before."""
    model, tokenizer = load_model(str(cached_tiny_model(tmp_path / "models", tokenizer="bpe-named")))
    vocabulary = WordTokens.of(tokenizer, list(WORDS))
    whole = [i for i, s in enumerate(vocabulary.sequences) if len(s) == 1]
    assert whole
    scores = np.random.default_rng(4).normal(size=(len(WORDS), model.args.hidden_size)).astype(np.float32)
    inputs = word_inputs(model, vocabulary, scores)
    embeddings = np.array(model.model.embed_tokens.weight)
    assert np.array_equal(inputs[whole], embeddings[[vocabulary.sequences[i][0] for i in whole]])
