"""The naming head: its file, its fit toward the reward's optimum, `naming-head` and `eval` with it."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner

from cli import cli
from common.errors import UserError
from llm.adapter_files import save_adapter
from llm.loading import load_model
from llm.naming_head import HEAD_FILE, NamingHead, head_beside, naming_tokens, readout_logits, spelling_features
from llm.word_steering import WordTokens, head_scorer
from llm_fixtures import tiny_model_dir  # noqa: F401
from rl.naming_head import (RECORD_FILE, STATES_FILE, HeadSettings, fit_head, fit_targets, head_positions,
                            load_states, naming_context)
from sft.lora import AdapterSettings, attach_adapter, trainable_weights

WORDS = ("crane", "slate", "jumpy", "vowel", "ghost", "bunny")


@pytest.fixture
def tiny_adapter(tiny_model_dir, tmp_path):  # noqa: F811
    model, _ = load_model(str(tiny_model_dir))
    mx.random.seed(0)
    config = attach_adapter(model, AdapterSettings(rank=2))
    return save_adapter(tmp_path / "adapter", trainable_weights(model), config)


def test_a_head_file_round_trips_and_a_broken_one_is_one_clear_error(tmp_path):
    rng = np.random.default_rng(0)
    head = NamingHead(rng.normal(size=(3, 8)).astype(np.float32), rng.normal(size=(8, 3)).astype(np.float32),
                      rng.normal(size=(156, 8)).astype(np.float32), 0.01)
    head.save(tmp_path / HEAD_FILE)
    again = NamingHead.load(tmp_path / HEAD_FILE)
    assert all(np.array_equal(getattr(head, k), getattr(again, k)) for k in ("down", "up", "letters"))
    assert again.beta == pytest.approx(0.01) and head_beside(tmp_path) == tmp_path / HEAD_FILE
    assert head_beside(tmp_path / "elsewhere") is None and head_beside(None) is None
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a naming head"):
        NamingHead.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "shapes.npz", down=head.down, up=head.down, letters=head.letters, beta=0.01)
    with pytest.raises(UserError, match="shapes"):
        NamingHead.load(tmp_path / "shapes.npz")
    assert again.gains.tolist() == [1.0, 1.0, 1.0]  # as fitted
    np.savez(tmp_path / "before-gains.npz", down=head.down, up=head.up, letters=head.letters, beta=0.01)
    assert NamingHead.load(tmp_path / "before-gains.npz").gains.tolist() == [1.0, 1.0, 1.0]
    NamingHead(head.down, head.up, head.letters, 0.01, np.array([0.5, 2.0, 3.0], np.float32)).save(tmp_path / "g.npz")
    assert NamingHead.load(tmp_path / "g.npz").gains.tolist() == [0.5, 2.0, 3.0]
    for gains, expected in ((np.ones(2), "gains must be 3 floats"), (np.array([1.0, -1.0, 1.0]), "out-of-range")):
        np.savez(tmp_path / "gains.npz", down=head.down, up=head.up, letters=head.letters, beta=0.01, gains=gains)
        with pytest.raises(UserError, match=expected):
            NamingHead.load(tmp_path / "gains.npz")


def test_a_head_at_zero_scores_words_as_the_models_first_token_logits_shared_among_its_words(tiny_model_dir):  # noqa: F811
    """With `up` and `letters` at zero a word's score is its first token's logit less the log of
    how many words share that token: the head starts at the model, whatever `down` is."""
    model, tokenizer = load_model(str(tiny_model_dir))
    vocabulary = WordTokens.of(tokenizer, list(WORDS))
    hidden = model.model.embed_tokens.weight.shape[1]
    head = NamingHead(np.random.default_rng(1).normal(size=(4, hidden)).astype(np.float32),
                      np.zeros((hidden, 4), np.float32), np.zeros((156, hidden), np.float32), 0.01)
    states = mx.array(np.random.default_rng(2).normal(size=(3, hidden)).astype(np.float32))
    logits = np.array(model.model.embed_tokens.as_linear(states))
    expected = logits[:, vocabulary.first] + vocabulary.offsets
    assert np.allclose(np.array(head_scorer(model, head, vocabulary)(states)), expected, atol=1e-4)
    # the letters' part adds each state's letter scores summed over the word's own spelling
    letters = np.zeros((156, hidden), np.float32)
    letters[2, 0] = 1.0  # a `c` first, read from the state's first coordinate
    spelled = readout_logits(states, mx.zeros((len(WORDS), hidden)), mx.array(head.down), mx.array(head.up),
                             mx.array(letters), mx.array(spelling_features(WORDS)))
    assert np.allclose(np.array(spelled)[:, 0], np.array(states)[:, 0]) and np.allclose(np.array(spelled)[:, 1:], 0)
    # the gains weigh the three terms: the model's own scores, the correction, the letters
    embeddings, down, up = mx.array(np.array(model.model.embed_tokens.weight)[vocabulary.first]), mx.array(
        head.down), mx.array(np.random.default_rng(3).normal(size=(hidden, 4)).astype(np.float32))
    spelling, parts = mx.array(spelling_features(WORDS)), []
    for only in range(3):
        unit = np.zeros(3, np.float32)
        unit[only] = 1.0
        parts.append(np.array(readout_logits(states, embeddings, down, up, mx.array(letters), spelling,
                                             gains=mx.array(unit))))
    gains = mx.array([0.5, 2.0, 3.0])
    weighed = np.array(readout_logits(states, embeddings, down, up, mx.array(letters), spelling, gains=gains))
    assert np.allclose(weighed, 0.5 * parts[0] + 2.0 * parts[1] + 3.0 * parts[2], atol=1e-4)
    assert np.allclose(sum(parts), np.array(readout_logits(states, embeddings, down, up, mx.array(letters), spelling)),
                       atol=1e-4)


def test_the_fit_moves_each_position_toward_the_words_that_fit_its_clues_and_picks_the_epoch_on_validation(
        tiny_model_dir):  # noqa: F811
    """States that carry which word fits (one coordinate per word): the fitted head names the
    word that fits far more often than the model did, on validation states it never trained on,
    and the kept epoch is the curve's best validation point."""
    model, tokenizer = load_model(str(tiny_model_dir))
    vocabulary = WordTokens.of(tokenizer, list(WORDS))
    hidden = model.model.embed_tokens.weight.shape[1]
    rng = np.random.default_rng(0)

    def states_for(secrets: np.ndarray) -> np.ndarray:
        states = rng.normal(size=(len(secrets), hidden)).astype(np.float32) * 0.1
        states[np.arange(len(secrets)), secrets] += 3.0
        return states

    train, validation = rng.integers(0, len(WORDS), 48), rng.integers(0, len(WORDS), 24)
    fits = np.full((48, len(WORDS)), 0.6, np.float32)
    fits[np.arange(48), train] = 1.0
    settings = HeadSettings(beta=0.05, rank=8, epochs=60, lr=1e-2, weight_decay=0.0)
    head, figures = fit_head(model, vocabulary, {"train": states_for(train), "validation": states_for(validation)},
                             fits, {"train": train, "validation": validation}, settings)
    assert figures["mean_p_after"]["validation"] > figures["mean_p_before"]["validation"] + 0.3
    assert figures["mean_p_after"]["train"] > figures["mean_p_before"]["train"] + 0.3
    best = max(figures["curve"], key=lambda point: point["validation_mean_p"])
    assert figures["best_epoch"] == best["epoch"] and head.beta == 0.05 and head.down.shape == (8, hidden)


def test_fit_targets_are_the_rewards_fit_with_every_played_word_at_zero(setup, tiny_model_dir):  # noqa: F811
    from rl.reward import RewardScorer, RewardWeights
    from llm.format import format_answer
    from eval.endgame import EndgamePosition

    state = setup.start
    for guess in ("salet", "crony", "fudge"):
        state = state.play(guess, int(setup.matrix[setup.lists.index(guess), setup.lists.answers.index("bunny")]))
    assert state.candidate_words() == ["bunny"]
    position = EndgamePosition("bunny", state)
    words = ("crony", "bunny", "crane", "funny")
    fits = fit_targets([position], words)[0]
    scored = RewardScorer(setup, RewardWeights(fit=1.0)).score([format_answer("x", w) for w in words[1:]], state)
    assert fits[0] == 0.0 and np.allclose(fits[1:], scored.component("fit"))
    _, tokenizer = load_model(str(tiny_model_dir))
    context = naming_context(tokenizer, position)
    assert tokenizer.decode(context[-len(naming_tokens(tokenizer)):]) == " Only" and len(naming_tokens(tokenizer)) > 1


@pytest.fixture(scope="module")
def setup():
    from solver.setup import load_setup

    return load_setup("answers")


def test_naming_head_command_fits_resumes_from_its_states_and_eval_plays_with_it(tiny_model_dir, tiny_adapter,  # noqa: F811
                                                                                 tmp_path):
    """`naming-head` writes the head and its record into the adapter folder and keeps the states;
    a second fit with another beta reads them instead of running the model; `eval` plays with the
    head (its name and JSON say so) and `--no-naming-head` without it."""
    args = ["naming-head", "--model", str(tiny_model_dir), "--adapter", str(tiny_adapter), "--positions", "6",
            "--validation-positions", "3", "--epochs", "4", "--rank", "2", "--quiet"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "naming head (beta 0.01" in result.output and "training positions" in result.output
    record = json.loads((tiny_adapter / RECORD_FILE).read_text())
    assert record["positions"] == {"train": 6, "validation": 3} and record["words"] == 12972
    assert [p["epoch"] for p in record["curve"]] == [4]
    head = NamingHead.load(tiny_adapter / HEAD_FILE)
    splits = head_positions(HeadSettings(positions=6, validation_positions=3))
    states = load_states(tiny_adapter / STATES_FILE, splits)
    assert [len(states[name]) for name in ("train", "validation")] == [6, 3]

    result = CliRunner().invoke(cli, [*args, "--beta", "0.05", "--json", str(tmp_path / "fit.json")])
    assert result.exit_code == 0, result.output
    again = json.loads((tmp_path / "fit.json").read_text())
    assert again["settings"]["beta"] == 0.05 and NamingHead.load(tiny_adapter / HEAD_FILE).beta == 0.05
    assert again["mean_p_before"] == record["mean_p_before"]  # the same states, read back
    assert not np.array_equal(NamingHead.load(tiny_adapter / HEAD_FILE).up, head.up)

    played = []
    for extra in ([], ["--no-naming-head"]):
        out = tmp_path / f"eval{len(extra)}.json"
        result = CliRunner().invoke(cli, ["eval", "--model", str(tiny_model_dir), "--adapter", str(tiny_adapter),
                                          "--games", "2", "--max-tokens", "24", "--quiet", "--json", str(out), *extra])
        assert result.exit_code == 0, result.output
        played.append(json.loads(out.read_text()))
    assert played[0]["policy"].endswith("+naming head") and played[0]["naming_head"] == str(tiny_adapter / HEAD_FILE)
    assert "naming head" not in played[1]["policy"] and played[1]["naming_head"] is None

    out = tmp_path / "endgame.json"
    result = CliRunner().invoke(cli, ["eval", "--model", str(tiny_model_dir), "--adapter", str(tiny_adapter),
                                      "--endgame", "--positions", "3", "--max-tokens", "24", "--quiet",
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["policy"].endswith("+naming head")


def test_naming_head_mistakes_are_one_line_and_exit_2_before_any_work(tiny_model_dir, tiny_adapter, tmp_path):  # noqa: F811
    cases = [
        (["naming-head", "--adapter", str(tmp_path / "missing")], "no adapters.safetensors"),
        (["naming-head", "--adapter", str(tiny_adapter), "--beta", "0"], "--beta"),
        (["naming-head", "--adapter", str(tiny_adapter), "--positions", "0"], "--positions"),
    ]
    (tmp_path / "states.npz").write_bytes(b"garbage")
    cases.append((["naming-head", "--model", str(tiny_model_dir), "--adapter", str(tiny_adapter), "--states",
                   str(tmp_path / "states.npz")], "not a naming states file"))
    for args, expected in cases:
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert expected in result.output and "Traceback" not in result.output
        assert not (tiny_adapter / HEAD_FILE).exists()
    NamingHead(np.zeros((2, 4), np.float32), np.zeros((4, 2), np.float32), np.zeros((156, 4), np.float32),
               0.01).save(tiny_adapter / HEAD_FILE)
    result = CliRunner().invoke(cli, ["eval", "--model", str(tiny_model_dir), "--adapter", str(tiny_adapter),
                                      "--games", "1", "--quiet"])
    assert result.exit_code == 2 and "hidden size 4" in result.output
    result = CliRunner().invoke(cli, ["eval", "--model", str(tiny_model_dir), "--adapter", str(tiny_adapter),
                                      "--games", "1", "--quiet", "--constrain-guess"])
    assert result.exit_code == 2 and "--no-naming-head" in result.output


def test_a_killed_fit_resumes_from_the_states_it_saved(tiny_model_dir, tiny_adapter, monkeypatch):  # noqa: F811
    """The states are saved a chunk at a time: killed in its second chunk, the run keeps the first,
    and run again it computes only the positions it lacks."""
    import rl.naming_head as naming_head

    computed, kill = [], [True]
    real = naming_head.naming_states

    def counted(model, tokenizer, positions, batch=naming_head.STATES_BATCH):
        if len(computed) == 1 and kill[0]:
            raise KeyboardInterrupt
        computed.append(len(positions))
        return real(model, tokenizer, positions, batch)

    monkeypatch.setattr(naming_head, "STATES_CHUNK", 2)
    monkeypatch.setattr(naming_head, "naming_states", counted)
    settings = HeadSettings(positions=3, validation_positions=2, epochs=2, rank=2)
    with pytest.raises(KeyboardInterrupt):
        naming_head.run_naming_head(str(tiny_model_dir), str(tiny_adapter), settings, None, show_progress=False)
    splits = head_positions(settings)
    assert [len(a) for a in load_states(tiny_adapter / STATES_FILE, splits).values()] == [2, 0]
    assert not (tiny_adapter / HEAD_FILE).exists()
    kill[0] = False
    naming_head.run_naming_head(str(tiny_model_dir), str(tiny_adapter), settings, None, show_progress=False)
    assert computed == [2, 1, 2]  # the first chunk, then only the train position and the validation ones left
    assert (tiny_adapter / HEAD_FILE).exists()


def test_saving_a_new_adapter_over_one_with_a_head_says_the_head_went_with_it(tiny_adapter, capsys):
    """A head fitted on the old weights does not fit the new ones, so it goes; a note names it."""
    (tiny_adapter / HEAD_FILE).write_bytes(b"a head of the old weights")
    weights = mx.load(str(tiny_adapter / "adapters.safetensors"))
    config = json.loads((tiny_adapter / "adapter_config.json").read_text())
    save_adapter(tiny_adapter, weights, config)
    assert not (tiny_adapter / HEAD_FILE).exists() and (tiny_adapter / "adapters.safetensors").exists()
    assert f"removed with the old one, which they were made for: {HEAD_FILE}" in capsys.readouterr().err
    save_adapter(tiny_adapter, weights, config)  # nothing else there: no note
    assert "note:" not in capsys.readouterr().err
