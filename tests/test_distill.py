"""`distill`: the model's own next token at ` Only` trained toward its naming head's choice."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
import pytest
from click.testing import CliRunner
from mlx.utils import tree_flatten

from cli import cli
from llm.adapter_files import save_adapter
from llm.loading import load_model
from llm_fixtures import tiny_model_dir  # noqa: F401
from sft.lora import AdapterSettings, attach_adapter, trainable_weights

HEAD_ARGS = ["--positions", "6", "--validation-positions", "3", "--epochs", "4", "--rank", "2", "--quiet"]
RUN_ARGS = ["--positions", "4", "--validation-positions", "2", "--answer-positions", "2", "--anchor-positions", "4",
            "--eval-every", "2",
            "--rank", "2", "--quiet"]


@pytest.fixture(scope="module")
def headed_adapter(tiny_model_dir, tmp_path_factory):  # noqa: F811
    """A tiny adapter with a naming head fitted beside it."""
    model, _ = load_model(str(tiny_model_dir))
    mx.random.seed(0)
    config = attach_adapter(model, AdapterSettings(rank=2))
    folder = save_adapter(tmp_path_factory.mktemp("start") / "adapter", trainable_weights(model), config)
    result = CliRunner().invoke(cli, ["naming-head", "--model", str(tiny_model_dir), "--adapter", str(folder),
                                      *HEAD_ARGS])
    assert result.exit_code == 0, result.output
    return folder


def run(model_dir, adapter, out, *extra):
    return CliRunner().invoke(cli, ["distill", "--model", str(model_dir), "--adapter", str(adapter), "--out",
                                    str(out), *RUN_ARGS, *extra])


def test_the_last_layer_learns_the_heads_word_token_by_token_and_the_teacher_stays_the_start(
        tiny_model_dir, headed_adapter):  # noqa: F811
    """The frozen pass's rows give the model's own logits exactly (LoRA at zero) at ` Only` and
    after each of the secret's tokens, the targets are distributions over tokens that continue an
    allowed word, and steps on the rows bring the model's next tokens toward the head's."""
    from llm.naming_head import NamingHead, head_beside
    from rl.distill import DistillSettings, Teacher, distill_loss, distill_positions, naming_logits, trainable_model
    from rl.naming_head import naming_context

    settings = DistillSettings(positions=4, validation_positions=2, answer_positions=2, rank=4)
    policy = trainable_model(str(tiny_model_dir), str(headed_adapter), settings, "auto")
    model = policy.model
    positions = distill_positions(settings, policy.tokenizer)["train"]
    teacher = Teacher(model, policy.tokenizer, NamingHead.load(head_beside(headed_adapter)))
    rows, finals = teacher.states(positions)
    secret = teacher.secret_tokens(positions[0])
    assert list(rows.owners[:len(secret)]) == [0] * len(secret) and list(rows.tokens[:len(secret)]) == list(secret)
    assert len(rows.tokens) == sum(len(teacher.secret_tokens(p)) for p in positions) == len(rows.mids)
    context = naming_context(policy.tokenizer, positions[0])
    for depth in range(len(secret)):
        whole = model(mx.array(context + list(secret[:depth]))[None])[0, -1]
        mine = naming_logits(model, mx.array(rows.mids[depth:depth + 1]))[0]
        np.testing.assert_allclose(np.array(mine), np.array(whole), atol=1e-3)
    targets = teacher.targets(finals, positions, rows)
    np.testing.assert_allclose(targets.weights.sum(axis=1), 1.0, atol=1e-4)
    later = np.flatnonzero(np.r_[False, rows.owners[1:] == rows.owners[:-1]])
    spelt = {int(t) for s in teacher.vocabulary.sequences for t in s[1:]}
    for row in later:  # a later token's target names only tokens that continue some allowed word
        assert {int(t) for t, w in zip(targets.tokens[row], targets.weights[row]) if w > 0} <= spelt
    arrays = [mx.array(a) for a in (rows.mids, targets.tokens, targets.weights)]
    loss_and_grad = nn.value_and_grad(model, lambda m, x, tokens, weights: distill_loss(naming_logits(m, x), tokens,
                                                                                       weights))
    optimizer = optim.Adam(learning_rate=1e-2)
    losses = []
    for _ in range(30):
        loss, grads = loss_and_grad(model, *arrays)
        optimizer.update(model, grads)
        mx.eval(model.parameters(), optimizer.state)
        losses.append(float(loss))
    assert losses[-1] < 0.8 * losses[0]
    trained = {name for name, _ in tree_flatten(model.trainable_parameters())}
    assert trained and all(".layers.1.mlp." in name for name in trained)
    again, _ = teacher.states(positions)  # the teacher is the start: the LoRA is off in its pass
    np.testing.assert_allclose(again.mids, rows.mids, atol=1e-5)


def test_the_teacher_is_the_head_as_it_plays_its_secret_bias_toward_the_answer_list_included(
        tiny_model_dir, headed_adapter):  # noqa: F811
    """A head RL trained carries a bias toward the game's secret list: the teacher adds it to the
    answer list's words at every position, as the head does in play, so its first-token targets
    put more weight on tokens that open answers than the same head without the bias."""
    from dataclasses import replace

    from llm.naming_head import NamingHead, head_beside
    from rl.distill import DistillSettings, Teacher, distill_positions, trainable_model
    from solver.setup import load_setup

    settings = DistillSettings(positions=4, validation_positions=2, answer_positions=2)
    policy = trainable_model(str(tiny_model_dir), str(headed_adapter), settings, "auto")
    positions = distill_positions(settings, policy.tokenizer)["train"]
    fitted = NamingHead.load(head_beside(headed_adapter))
    plain, biased = (Teacher(policy.model, policy.tokenizer, replace(fitted, secret_bias=bias)) for bias in (0.0, 5.0))
    rows, finals = plain.states(positions)
    answers = set(load_setup("answers").start.secret_words)
    first_tokens = np.array([sequence[0] for sequence in plain.vocabulary.sequences])
    is_answer = np.array([w in answers for w in plain.vocabulary.words], np.float64)
    answer_share = np.bincount(first_tokens, weights=is_answer) / np.maximum(np.bincount(first_tokens), 1)
    first = np.r_[True, rows.owners[1:] != rows.owners[:-1]]

    def answer_weight(teacher: Teacher) -> float:
        """The answers' share among the words behind each first-token target, weighed by the target."""
        targets = teacher.targets(finals, positions, rows)
        return float((targets.weights[first] * answer_share[targets.tokens[first]]).sum())

    def answer_mass(teacher: Teacher) -> float:
        """The answers' share of the teacher's word distributions at the positions."""
        return float((np.array(mx.softmax(teacher.score(mx.array(finals)), axis=-1)) @ is_answer).mean())

    assert answer_mass(biased) > answer_mass(plain) + 0.3
    assert answer_weight(biased) > answer_weight(plain)


def test_the_spelled_output_layer_starts_as_the_models_and_writes_as_a_plain_lm_head(tiny_model_dir,  # noqa: F811
                                                                                     tmp_path):
    """W + S P at P = 0 is the model's own output layer; a folder given W + S P as its lm_head
    loads in mlx-lm and makes those logits, its input embeddings untouched."""
    import shutil

    from llm.output_layer import output_layer, output_weight
    from llm.spelled_output import FEATURES, SpelledOutput, token_spelling, write_output_layer

    model, tokenizer = load_model(str(tiny_model_dir))
    weight = output_weight(model).astype(mx.float32)
    spelling = token_spelling(tokenizer, weight.shape[0])
    assert spelling.shape == (weight.shape[0], FEATURES) and spelling.any()
    crane = tokenizer.encode(" crane", add_special_tokens=False)
    if len(crane) == 1:  # an opening token: its places in the word are its features
        assert spelling[crane[0], 0 * 26 + 2] == 1 and spelling[crane[0], 4 * 26 + 4] == 1
    openings = token_spelling(tokenizer, weight.shape[0], "openings")
    known = min(weight.shape[0], len(tokenizer.get_vocab()))
    opening = np.array([tokenizer.decode([t]).startswith(" ") for t in range(known)]
                       + [False] * (weight.shape[0] - known))
    assert not openings[~opening].any() and np.array_equal(openings[opening], spelling[opening])
    listed = tokenizer.decode([next(t for t in range(known) if openings[t].any())])[1:]
    words = token_spelling(tokenizer, weight.shape[0], "words", frozenset({listed}))
    spelled_tokens = {tokenizer.decode([t]) for t in np.flatnonzero(words.any(axis=1))}
    assert spelled_tokens == {" " + listed}  # a whole listed word and nothing else, not even its openings
    layer = SpelledOutput(weight, mx.array(spelling))
    h = mx.random.normal((3, weight.shape[1]))
    np.testing.assert_allclose(np.array(layer(h)), np.array(output_layer(model)(h)), atol=1e-4)
    layer.projection = mx.random.normal(layer.projection.shape) * 0.1
    folder = tmp_path / "spelled"
    shutil.copytree(tiny_model_dir, folder)
    write_output_layer(folder, layer.merged())
    spelled, _ = load_model(str(folder))
    np.testing.assert_allclose(np.array(output_layer(spelled)(h)), np.array(layer(h)), atol=1e-3)
    np.testing.assert_allclose(np.array(spelled.model.embed_tokens.weight), np.array(model.model.embed_tokens.weight))


def test_distill_fits_keeps_the_best_on_validation_and_a_rerun_reuses_its_states(tiny_model_dir,  # noqa: F811
                                                                                headed_adapter, tmp_path):
    out = tmp_path / "run"
    result = run(tiny_model_dir, headed_adapter, out, "--epochs", "4", "--part", "mlp", "--json",
                 str(tmp_path / "s.json"))
    assert result.exit_code == 0, result.output
    assert "the model's own most likely tokens spell the secret" in result.output
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["positions"] == {"train": 4, "validation": 2, "answers": 2}
    assert [p["epoch"] for p in summary["curve"]] == [0, 2, 4]
    assert summary["rows"]["train"] >= 4 and set(summary["best"]["validation"]) == {"top1", "spells", "mean_p"}
    assert summary["best"]["epoch"] in (0, 2, 4) and set(summary["head_figures"]) == {"train", "validation", "answers"}
    load_model(str(tiny_model_dir), str(out / "best"))  # an ordinary adapter over the base model
    states = (out / "states.npz").stat().st_mtime_ns
    result = run(tiny_model_dir, headed_adapter, out, "--epochs", "6", "--part", "mlp", "--json",
                 str(tmp_path / "s2.json"))
    assert result.exit_code == 0, result.output
    assert (out / "states.npz").stat().st_mtime_ns == states  # the frozen pass was not run again
    again = json.loads((tmp_path / "s2.json").read_text())
    assert again["curve"][:3] == summary["curve"]  # the same states, the same first epochs


def test_distill_of_the_output_layer_writes_a_model_that_plays_without_the_start(tiny_model_dir,  # noqa: F811
                                                                                 headed_adapter, tmp_path):
    out = tmp_path / "run"
    result = run(tiny_model_dir, headed_adapter, out, "--epochs", "2", "--lr", "1e-2", "--json",
                 str(tmp_path / "s.json"))
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["written"] == str(out / "model") and summary["settings"]["part"] == "output"
    assert summary["rows"]["anchor"] > 4 * 10 and summary["curve"][0]["anchor_top1"] > 0  # whole answers, held
    record = json.loads((out / "model" / "export.json").read_text())
    assert "spelled" in record["output_layer"]
    assert json.loads((out / "model" / "config.json").read_text())["tie_word_embeddings"] is False
    load_model(str(out / "model"))  # a plain mlx-lm model folder: no adapter, no head


def test_distill_mistakes_are_one_line_and_exit_2(tiny_model_dir, headed_adapter, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    assert run(tiny_model_dir, headed_adapter, out, "--epochs", "2").exit_code == 0
    result = run(tiny_model_dir, headed_adapter, out, "--epochs", "2", "--positions", "5")
    assert result.exit_code == 2 and "positions" in result.output and "Traceback" not in result.output
    result = run(tiny_model_dir, headed_adapter, tmp_path / "other", "--epochs", "0")
    assert result.exit_code == 2
    bare = tmp_path / "bare"
    model, _ = load_model(str(tiny_model_dir))
    config = attach_adapter(model, AdapterSettings(rank=2))
    save_adapter(bare, trainable_weights(model), config)
    result = run(tiny_model_dir, bare, tmp_path / "third", "--epochs", "2")
    assert result.exit_code == 2 and "no naming head" in result.output


def test_distill_teaches_where_its_own_games_went_and_chooses_by_its_own_validation_games(
        tiny_model_dir, headed_adapter, tmp_path):  # noqa: F811
    """Positions of the model's own games (any eval JSON: here the solver's) with one candidate left
    join the training rows (training words only), those on validation words choose the epoch."""
    from eval.endgame import model_positions
    from solver.setup import load_setup

    games = {}
    for split in ("train", "validation"):
        games[split] = tmp_path / f"{split}.json"
        result = CliRunner().invoke(cli, ["eval", "--policy", "solver", "--split", split, "--games", "8", "--seed",
                                          "1", "--quiet", "--json", str(games[split])])
        assert result.exit_code == 0, result.output
    answers = load_setup("answers")
    expected = {split: len({p.key for p in model_positions(answers, json.loads(path.read_text()), max_candidates=1)})
                for split, path in games.items()}
    assert min(expected.values()) > 0
    out = tmp_path / "run"
    result = run(tiny_model_dir, headed_adapter, out, "--epochs", "2", "--part", "mlp", "--own-games",
                 str(games["train"]), "--own-validation", str(games["validation"]), "--own-repeat", "3", "--json",
                 str(tmp_path / "s.json"))
    assert result.exit_code == 0, result.output
    assert "of its own games" in result.output and "its own validation games" in result.output
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["positions"] == {"train": 4, "validation": 2, "answers": 2, "own": expected["train"],
                                    "own_validation": expected["validation"]}
    assert summary["chosen_by"] == "own_validation" and set(summary["best"]) >= {"own", "own_validation"}
    assert summary["rows"]["fitted"] == summary["rows"]["train"] + 3 * summary["rows"]["own"]
    fewer = json.loads(games["train"].read_text())
    fewer["per_game"] = fewer["per_game"][:4]
    (tmp_path / "fewer.json").write_text(json.dumps(fewer))
    states = (out / "states.npz").stat().st_mtime_ns
    result = run(tiny_model_dir, headed_adapter, out, "--epochs", "2", "--part", "mlp", "--own-games",
                 str(tmp_path / "fewer.json"), "--json", str(tmp_path / "s2.json"))
    assert result.exit_code == 0, result.output
    assert (out / "states.npz").stat().st_mtime_ns == states  # the beginning of the saved own rows, no new pass
    fewer_positions = len({p.key for p in model_positions(answers, fewer, max_candidates=1)})
    again = json.loads((tmp_path / "s2.json").read_text())
    assert again["positions"]["own"] == fewer_positions < expected["train"] and again["chosen_by"] == "validation"
    result = run(tiny_model_dir, headed_adapter, tmp_path / "other", "--own-games", str(games["validation"]))
    assert result.exit_code == 2 and "not training words" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "other" / "states.npz").exists()
    result = run(tiny_model_dir, headed_adapter, tmp_path / "other", "--own-games", str(tmp_path / "s.json"))
    assert result.exit_code == 2 and "no per-game records" in result.output


@pytest.mark.parametrize("kind", ["bpe-named", "sentencepiece"])
def test_whole_word_rows_are_the_words_one_token_writes_where_the_model_names_them(kind, tmp_path_factory):
    """`--spelled words` spells the tokens that write an allowed word whole after the naming word,
    read in context: a SentencePiece `▁raise` (which decodes alone without its space) is a word
    row as a byte-level ` raise` is, and each row spells its word's letters at their places."""
    from llm.spelled_output import LETTERS, one_token_words, token_spelling
    from solver.setup import load_setup
    from tiny_model import cached_tiny_model

    _, tokenizer = load_model(str(cached_tiny_model(tmp_path_factory.getbasetemp() / "models", tokenizer=kind)))
    allowed = load_setup("answers").lists.allowed
    features = token_spelling(tokenizer, len(tokenizer.get_vocab()), "words", frozenset(allowed))
    whole = one_token_words(tokenizer, frozenset(allowed))
    assert len(whole) >= 5 and set(np.flatnonzero(features.any(axis=1))) == set(whole)
    for token, word in whole.items():
        places = [int(i) // LETTERS for i in np.flatnonzero(features[token, :5 * LETTERS])]
        letters = [chr(ord("a") + int(i) % LETTERS) for i in np.flatnonzero(features[token, :5 * LETTERS])]
        assert places == list(range(5)) and "".join(letters) == word


def test_a_whole_word_share_draws_that_share_of_secrets_the_model_writes_as_one_token(tmp_path_factory):
    """`--whole-word-share`: the share of training positions on the words a whole-word spelling term
    can lift (one token where the model names a word), the rest on longer words; unset, every
    training word alike. Held-out words stay out either way."""
    from eval.splits import is_held_out
    from llm.spelled_output import one_token_words
    from rl.distill import DistillSettings, distill_positions
    from solver.setup import load_setup
    from tiny_model import cached_tiny_model

    _, tokenizer = load_model(str(cached_tiny_model(tmp_path_factory.getbasetemp() / "models", tokenizer="bpe-named")))
    whole = set(one_token_words(tokenizer, frozenset(load_setup("allowed").lists.allowed)).values())
    assert 0 < len(whole) < 12_972
    for share, expected in ((0.75, 15), (0.0, 0), (1.0, 20)):
        settings = DistillSettings(positions=20, validation_positions=2, answer_positions=2, whole_word_share=share)
        train = distill_positions(settings, tokenizer)["train"]
        assert sum(p.secret in whole for p in train) == expected and len(train) == 20
        assert not any(is_held_out(p.secret) for p in train)
    drawn = distill_positions(DistillSettings(positions=20, validation_positions=2, answer_positions=2), tokenizer)
    assert sum(p.secret in whole for p in drawn["train"]) < 15
