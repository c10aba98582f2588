"""The endgame benchmark (eval --endgame), its paired comparison, and endgame RL start states."""

import json

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner

from cli import cli
from eval.endgame import EndgamePosition, answer_fit, model_positions, position_record, summarise_endgame, teacher_positions
from eval.splits import held_out_test, trainable, untaught
from llm.format import ALREADY_GUESSED, NOT_ALLOWED, Rejection, format_answer
from llm.histories import RANDOM, history_guess
from llm.loading import load_model
from llm_fixtures import tiny_model_dir  # noqa: F401
from common.errors import UserError
from rl.config import build_config
from rl.reward import RewardScorer
from rl.rollout import RolloutSettings, play
from sft.states import MODEL, model_game_states, sample_endgame_states
from solver.feedback import feedback
from solver.setup import load_setup


@pytest.fixture(scope="module")
def setup():
    return load_setup("answers")


def run_cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def position_at(setup, secret: str, guesses: list[str], rejected=()) -> EndgamePosition:
    state = setup.start
    for guess in guesses:
        state = state.play(guess, feedback(guess, secret))
    return EndgamePosition(secret, state, tuple(rejected))


def test_teacher_positions_have_few_candidates_and_repeat_for_a_seed(setup):
    secrets = held_out_test(setup.lists.answers)
    positions = teacher_positions(setup, setup.solver(), secrets, 60, seed=3)
    assert len(positions) == 60
    for p in positions:
        assert 1 <= len(p.state.candidates) <= 6 and not p.state.over and p.state.turns
        assert p.secret in secrets and p.secret in p.state.candidate_words()
    assert {p.secret for p in positions} > set()  # secrets cycle: many distinct ones
    assert len({p.secret for p in positions}) >= 40
    again = teacher_positions(setup, setup.solver(), secrets, 60, seed=3)
    assert [p.key for p in again] == [p.key for p in positions]
    assert [p.key for p in teacher_positions(setup, setup.solver(), secrets, 60, seed=4)] != [p.key for p in positions]
    # Some prompts name refused answers, as eval's do after an unplayable answer.
    assert 0 < sum(bool(p.rejected) for p in positions) < 30


def test_each_answer_is_classified_at_its_position(setup):
    # After these guesses only "bunny" fits.
    position = position_at(setup, "bunny", ["salet", "crony", "fudge"])
    assert position.state.candidate_words() == ["bunny"]
    closed = position_record(position, format_answer("Only bunny remains.", "bunny"))
    assert closed["closed"] and closed["consistent"] and not closed["unplayable"] and closed["candidates"] == 1
    last = position_record(position, format_answer("Only fudge remains.", "fudge"))
    assert last["repeat"] and last["repeat_last"] and last["unplayable"] and not last["closed"]
    earlier = position_record(position, format_answer("x", "crony"))
    assert earlier["repeat"] and not earlier["repeat_last"]
    other = position_record(position, format_answer("x", "crane"))
    assert not other["unplayable"] and not other["consistent"] and not other["closed"]
    assert other["refused_again"] is None  # no refusal named: the rate does not count this position
    refused = position_at(setup, "bunny", ["salet", "crony", "fudge"], [Rejection("bunnu", NOT_ALLOWED)])
    again = position_record(refused, format_answer("x", "bunnu"))
    assert again["refused_again"] is True and again["failure"] == NOT_ALLOWED

    summary = summarise_endgame([closed, last, earlier, other, again])
    assert summary["positions"] == 5 and summary["one_candidate_positions"] == 5
    assert summary["closed_rate"] == 0.2 and summary["repeat_rate"] == 0.4 and summary["repeat_last_rate"] == 0.2
    assert summary["refused_again_rate"] == 1.0 and summary["unplayable_rate"] == 0.6
    assert summary["one_candidate_closed_rate"] == 0.2 and summary["by_candidates"] == {
        "1": {"positions": 5, "closing_rate": 0.2}}
    # The share of clue tiles kept, over the playable answers: bunny keeps all 15; as the secret,
    # crane would have turned salet's A and E yellow, crony's C and R green and its Y grey
    # (N moves to green at 4), fudge's U grey and E green: 8 of 15 kept.
    assert answer_fit(closed) == 1.0 and answer_fit(other) == pytest.approx(8 / 15) and answer_fit(last) is None
    assert summary["fit_rate"] == pytest.approx(round((1 + 8 / 15) / 2, 4))  # the other three are unplayable


def test_positions_from_a_models_own_games_carry_the_refusals_it_saw(setup):
    secret = "bunny"
    turns = ["salet", "crony", "fudge"]
    moves = [{"guess": g, "failure": None} for g in turns]
    moves += [{"guess": "fudge", "failure": ALREADY_GUESSED}, {"guess": "bunny", "failure": None}]
    result = {"per_game": [{"secret": secret, "won": True, "moves": moves}]}
    positions = model_positions(setup, result)
    one_left = [p for p in positions if len(p.state.candidates) == 1]
    assert [p.rejected for p in one_left] == [(), (Rejection("fudge", ALREADY_GUESSED),)]
    assert all(p.state.guesses == turns for p in one_left)
    with pytest.raises(UserError):
        model_positions(setup, {"per_game": [{"secret": "zzzzz", "moves": []}]})


def test_endgame_cli_writes_positions_pairs_them_and_refuses_misuse(tiny_model_dir, tmp_path):  # noqa: F811
    args = ["eval", "--model", tiny_model_dir, "--endgame", "--split", "validation", "--positions", 12,
            "--max-tokens", 8, "--quiet", "--seed", 1]
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for path, batch in ((first, 32), (second, 5)):
        result = run_cli(*args, "--batch-size", batch, "--json", path)
        assert result.exit_code == 0, result.output
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    assert a["kind"] == "endgame" and a["positions"] == 12 and len(a["per_position"]) == 12
    assert a["temperature"] == 0.7 and a["split"] == "validation"
    # the same seed, the same answers, at any batch size
    assert [r["text"] for r in a["per_position"]] == [r["text"] for r in b["per_position"]]
    paired = tmp_path / "paired.json"
    shown = run_cli("eval", "--compare", first, second, "--json", paired)
    assert shown.exit_code == 0, shown.output
    figures = json.loads(paired.read_text())
    assert figures["positions"] == 12 and figures["sign_test_p"] == 1.0
    assert {c["figure"] for c in figures["changes"]} >= {"closed_rate", "one_candidate_closed_rate", "repeat_rate"}
    # An endgame file against a whole-game one, the solver, and --games are refused in one line.
    games = tmp_path / "games.json"
    assert run_cli("eval", "--model", tiny_model_dir, "--games", 2, "--max-tokens", 8, "--quiet", "--json",
                   games).exit_code == 0
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**a, "per_position": [{**a["per_position"][0], "key": "no turns", "unplayable": False,
                                                         "guess": "crane"}]}))
    for bad in (["eval", "--compare", first, games], ["eval", "--endgame", "--policy", "solver"],
                ["eval", "--compare", first, broken],
                [*args, "--games", 3], ["eval", "--model", tiny_model_dir, "--from-games", first]):
        refused = run_cli(*bad)
        assert refused.exit_code == 2 and refused.output.count("error:") == 1, refused.output


def test_endgame_start_states_and_single_turn_rollouts(tiny_model_dir, setup):  # noqa: F811
    rng = np.random.default_rng(0)
    secrets = trainable(setup.lists.answers)
    starts = sample_endgame_states(setup, setup.solver(), secrets, 5, rng, max_candidates=3)
    assert all(1 <= len(s.state.candidates) <= 3 and s.secret in secrets for s in starts)
    assert all(len(s.players) == len(s.state.turns) for s in starts)
    model, tokenizer = load_model(str(tiny_model_dir))
    mx.random.seed(0)
    rollout = play(model, tokenizer, RewardScorer(setup), starts, RolloutSettings(group_size=2, max_tokens=8, turns=1),
                   rng)
    assert len(rollout.groups) == 5 and [g.state for g in rollout.groups] == [s.state for s in starts]


def own_games(secret: str) -> dict:
    """An eval games file with one game on `secret`: three played guesses, a repeat the game refused, a win."""
    moves = [{"guess": g, "failure": None} for g in ("salet", "crony", "fudge")]
    return {"per_game": [{"secret": secret, "moves": moves + [{"guess": "fudge", "failure": ALREADY_GUESSED},
                                                              {"guess": "bunny", "failure": None}]}]}


def test_own_game_start_states_carry_their_refusals_into_the_first_prompt(tiny_model_dir, setup):  # noqa: F811
    """start: games starts RL where the model's own loop is: its positions, with the refusals it saw."""
    secrets = trainable(setup.lists.answers)
    assert "bunny" in secrets
    starts = model_game_states(model_positions(setup, own_games("bunny")), secrets)
    assert [s.rejected for s in starts if len(s.state.candidates) == 1] == [(), (Rejection("fudge", ALREADY_GUESSED),)]
    assert all(s.players == (MODEL,) * len(s.state.turns) and s.secret == "bunny" for s in starts)
    model, tokenizer = load_model(str(tiny_model_dir))
    rollout = play(model, tokenizer, RewardScorer(setup), starts[-1:], RolloutSettings(group_size=2, max_tokens=8,
                                                                                       turns=1), np.random.default_rng(0))
    (group,) = rollout.groups
    assert group.rejected == starts[-1].rejected and "fudge" in tokenizer.decode(group.prompt).split("Not accepted")[-1]
    # Expert iteration at the start states alone names the same refusals.
    from rl.expert_iteration import EISettings, ExpertIteration
    ei = ExpertIteration(model, tokenizer, RewardScorer(setup), setup.solver(),
                         EISettings(positions="sampled", samples=2), RolloutSettings(max_tokens=8))
    (sampled,) = ei.positions(starts[-1:], np.random.default_rng(0)).groups
    assert sampled.rejected == starts[-1].rejected and sampled.prompt == group.prompt
    held_out = held_out_test(setup.lists.answers)[0]
    with pytest.raises(UserError, match="may not train"):
        model_game_states(model_positions(setup, own_games(held_out)), secrets)


def test_endgame_config_keys_are_checked_before_work():
    config = build_config({"rollout": {"start": "endgame", "turns": 1}, "eval_endgame": 64, "best_by": "endgame"})
    assert config.rollout.start == "endgame" and config.rollout.turns == 1 and config.eval_endgame == 64
    for bad, named in (({"rollout": {"start": "middle"}}, "rollout.start"), ({"rollout": {"turns": 7}}, "rollout.turns"),
                       ({"eval_games": 0, "eval_every": 5}, "eval_games"), ({"best_by": "endgame"}, "eval_endgame"),
                       ({"best_by": "luck"}, "best_by"), ({"rollout": {"start": "games"}}, "rollout.start_games"),
                       ({"rollout": {"start_games": "g.json"}}, "rollout.start games"),
                       ({"rollout": {"any_share": 0.5}}, "rollout.any_share"),
                       ({"rollout": {"start": "endgame", "any_share": 1.5}}, "rollout.any_share")):
        with pytest.raises(UserError, match=named):
            build_config(bad)


def test_any_share_mixes_ordinary_start_states_into_the_own_game_ones(tiny_model_dir, tmp_path):  # noqa: F811
    """Half of each round's games start at ordinary positions (other secrets), half at the games file's."""
    games = tmp_path / "own.json"
    games.write_text(json.dumps(own_games("bunny")))
    out = tmp_path / "rl"
    result = run_cli("rl", "--model", tiny_model_dir, "--out", out, "--steps", 1, "--schedule", "grpo:1",
                     "--start", "games", "--start-games", games, "--any-share", 0.5, "--turns", 1,
                     "--group-size", 2, "--games", 2, "--groups", 1, "--max-tokens", 8, "--quiet")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (record,) = [r for r in records if r["phase"] == "grpo"]
    rounds = record["games"] // 2
    assert "bunny" in record["secrets"] and len(record["secrets"]) > 1
    assert record["games"] == 2 * rounds  # one own-game and one ordinary start each round


def test_secret_split_untaught_plays_only_words_sft_never_taught(tiny_model_dir, tmp_path):  # noqa: F811
    out = tmp_path / "rl"
    result = run_cli("rl", "--model", tiny_model_dir, "--out", out, "--steps", 1, "--schedule", "grpo:1",
                     "--start", "endgame", "--any-share", 0.5, "--secret-split", "untaught", "--turns", 1,
                     "--group-size", 2, "--games", 4, "--groups", 1, "--max-tokens", 8, "--quiet")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (record,) = [r for r in records if r["phase"] == "grpo"]
    assert record["secrets"] and set(record["secrets"]) <= set(untaught(load_setup().lists.answers))


def test_endgame_rl_run_logs_the_held_out_closing_rate_and_keeps_the_best(tiny_model_dir, tmp_path):  # noqa: F811
    out = tmp_path / "rl"
    result = run_cli("rl", "--model", tiny_model_dir, "--out", out, "--steps", 2, "--schedule", "grpo:1",
                     "--start", "endgame", "--turns", 1, "--group-size", 2, "--games", 2, "--groups", 1,
                     "--max-tokens", 8, "--eval-every", 1, "--eval-games", 0, "--eval-endgame", 6,
                     "--best-by", "endgame", "--quiet")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    heldout = [r for r in records if r["phase"] == "heldout"]
    assert [r["step"] for r in heldout] == [0, 1, 2]
    assert all(r["heldout_endgame_positions"] == 6 and "heldout_endgame_closed_rate" in r for r in heldout)
    assert all(r["games"] == r["groups"] for r in records if r["phase"] == "grpo")  # single-turn: a group a game
    assert json.loads((out / "best.json").read_text())["step"] == 0  # nothing beat the start: it stays best
    curves = run_cli("report", out)
    assert curves.exit_code == 0 and "endgame" in curves.output


def test_a_careless_stand_in_stops_when_no_word_is_left(tmp_path):
    """On a two-word list the random stand-in has nothing to play after one turn: it stops (it looped forever)."""
    words = tmp_path / "two.txt"
    words.write_text("crane\nslate\n")
    small = load_setup("answers", str(words), str(words))
    state = small.start.play("slate", feedback("slate", "crane"))
    assert history_guess(RANDOM, state, small.solver(), "crane", 0, np.random.default_rng(0)) is None


def test_closing_logprob_scores_the_teachers_naming_sentence(tiny_model_dir, setup):  # noqa: F811
    """studies/closing_logprob.py: the teacher's answer cut before ` Only X remains.`, and the
    model's log-probability of that sentence and the tags, one number per position."""
    from studies.closing_logprob import naming_logprob, other_secrets, scored_text
    from sft.cot import truthful_answer

    position = position_at(setup, "bunny", ["salet", "crony", "fudge"])
    before, named = scored_text(position)
    assert before + named == truthful_answer(position.state, "bunny")
    assert named == " Only bunny remains.</think><guess> bunny</guess>"
    model, tokenizer = load_model(str(tiny_model_dir))
    logprob, tokens = naming_logprob(model, tokenizer, position)
    assert tokens == len(tokenizer.encode(named, add_special_tokens=False)) and -100 * tokens < logprob < 0
    assert scored_text(position, "crane") == (before, " Only crane remains.</think><guess> crane</guess>")
    assert naming_logprob(model, tokenizer, position, "crane")[0] != logprob
    other = position_at(setup, "lowly", ["salet", "crony"])
    assert other_secrets([position, other, position]) == ["lowly", "bunny", "lowly"]


def test_endgame_data_teaches_the_teachers_answer_at_training_secrets(setup):
    """studies/endgame_data.py: every example is a position with 1-6 candidates left on a
    training secret, and at one candidate its target names that word."""
    from llm.format import parse_answer
    from studies.endgame_data import endgame_examples

    rows = endgame_examples(24, seed=5, rejected=0.5)
    assert len(rows) == 24 and rows == endgame_examples(24, seed=5, rejected=0.5)
    assert any("Not accepted:" in r["messages"][1]["content"] for r in rows)
    training = set(trainable(setup.lists.answers))
    named = 0
    for row in rows:
        assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant"]
        parsed = parse_answer(row["messages"][-1]["content"], setup.lists)
        assert parsed.ok
        if " remains." in parsed.thought:
            named += 1
            assert parsed.guess in training
    assert named > 0


def test_named_words_sorts_what_a_model_names_at_held_out_positions(setup):
    """studies/named_words.py: the secret, a training answer (never right at a held-out
    position), another held-out answer, a word only in the allowed list, or a non-word."""
    from studies.named_words import named_words

    lists = setup.lists
    test_words = held_out_test(lists.answers)
    secret, other_held_out = test_words[0], test_words[1]
    training = trainable(lists.answers)[0]
    allowed_only = next(w for w in lists.allowed if w not in set(lists.answers))
    records = [{"secret": secret, "candidates": 1, "guess": g}
               for g in (secret, training, training, other_held_out, allowed_only, "qzxvv", None)]
    records.append({"secret": secret, "candidates": 3, "guess": training})
    counts = named_words({"per_position": records})
    assert counts["one_candidate"] == {"secret": 1, "training_answer": 2, "held_out_answer": 1, "allowed_only": 1,
                                       "not_a_word": 1, "no_guess": 1, "positions": 7}
    assert counts["all"]["training_answer"] == 3 and counts["all"]["positions"] == 8


def test_adapter_drift_measures_what_training_added_to_the_starts_updates(tmp_path):
    """studies/adapter_drift.py: a continued adapter's change is the difference of the updates
    (scale * A @ B per layer), a stacked one's is its own updates, both against the start's norm."""
    import mlx.core as mx

    from llm.adapter_files import STACKED_ON, write_adapter
    from studies.adapter_drift import drift, effective_updates

    def adapter(name: str, a: float, b: float, rank: int, **extra) -> str:
        folder = tmp_path / name
        folder.mkdir()
        weights = {"layers.0.q.lora_a": mx.full((4, rank), a), "layers.0.q.lora_b": mx.full((rank, 3), b)}
        write_adapter(folder, weights, {"fine_tune_type": "lora", "num_layers": 1,
                                        "lora_parameters": {"rank": rank, "scale": 2.0, "dropout": 0.0}, **extra})
        return str(folder)

    start, _ = effective_updates(adapter("start", 1.0, 1.0, 2))  # every entry 2 * 2 = 4
    continued = drift(start, *effective_updates(adapter("continued", 1.0, 1.1, 2)))  # every entry 4.4
    assert continued["relative_change"] == pytest.approx(0.1) and not continued["stacked"]
    stacked = drift(start, *effective_updates(adapter("stacked", 0.5, 0.5, 1, **{STACKED_ON: "../start"})))
    assert stacked["relative_change"] == pytest.approx(0.5 / 4) and stacked["stacked"]


def test_naming_examples_counts_targets_that_name_the_one_word_left(setup):
    """studies/naming_examples.py: the teacher's ` Only X remains.` targets, by word."""
    from sft.cot import truthful_answer
    from studies.naming_examples import naming_counts

    one_left = position_at(setup, "bunny", ["salet", "crony", "fudge"])
    rows = [{"messages": [{"role": "assistant", "content": truthful_answer(one_left.state, "bunny")}]}] * 3
    rows.append({"messages": [{"role": "assistant", "content": "<think>Pattern: _____.</think><guess> salet</guess>"}]})
    counts = naming_counts(rows)
    assert counts["examples"] == 4 and counts["naming_examples"] == 3 and counts["words_named"] == 1
    assert counts["naming_share"] == 0.75 and counts["times_each_word_is_named"]["max"] == 3


def test_histories_are_drawn_without_proofs_only_where_proofs_are_slow(small_lists_files):
    """With the allowed list as secrets the solver proves moves from 5 guesses left, too slow for
    RL's start states: their histories come from a proof-free twin that plays the greedy move."""
    answers, allowed = small_lists_files
    answers_solver = load_setup("answers", answers, allowed).solver()
    assert answers_solver.for_histories() is answers_solver  # stored benchmark positions stay as drawn
    allowed_setup = load_setup("allowed", answers, allowed)
    solver = allowed_setup.solver()
    twin = solver.for_histories()
    assert (solver.safe_from, twin.safe_from) == (5, 0)
    assert twin.memo_tables()["played"] is not solver.memo_tables()["played"]
    secret, first = allowed_setup.lists.allowed[7], allowed_setup.lists.allowed[100]
    state = allowed_setup.start.play(first, feedback(first, secret))
    assert state.guesses_left == 5 and len(state.candidates) > 2
    assert twin.choose(state) == twin.rank(state, 1)[0].word


def test_own_answers_turn_a_models_recorded_endgame_answers_into_an_endgame_result(setup, tmp_path):
    """studies/own_answers.py: the answers a games file holds at its endgame positions, paired by
    `eval --compare` with a fresh `--from-games` run at the same positions."""
    from eval.report import compare_endgame
    from studies.own_answers import recorded_answers

    games = own_games("bunny")
    for move in games["per_game"][0]["moves"]:
        move["text"] = format_answer("x", move["guess"])
    result = recorded_answers({**games, "secrets": "answers", "temperature": 0.7})
    positions = model_positions(setup, games)
    assert [r["key"] for r in result["per_position"]] == [p.key for p in positions]
    assert [r["guess"] for r in result["per_position"]] == ["fudge", "fudge", "bunny"][-len(positions):]
    assert result["one_candidate_positions"] == 2 and result["one_candidate_closed_rate"] == 0.5
    assert result["one_candidate_repeat_rate"] == 0.5 and result["temperature"] == 0.7
    fresh = {**result, "per_position": [position_record(p, format_answer("x", "bunny")) for p in positions]}
    paired = compare_endgame(result, fresh, "recorded", "fresh")
    assert paired["positions"] == len(positions) and paired["closed_only_b"] == len(positions) - 1


def test_thought_truth_scores_playable_thoughts_as_the_reward_does_and_reads_the_one_left(setup):
    """studies/thought_truth.py: every playable answer's thought checked as the reward checks it, and
    at one-candidate positions the thoughts that name the secret or an earlier guess."""
    from sft.cot import check_thought, true_sentences, truthful_answer
    from studies.thought_truth import game_counts, rates

    states = [position_at(setup, "bunny", ["salet", "crony", "fudge"][:n]).state for n in range(4)]
    assert len(states[3].candidates) == 1
    partly_true = " ".join(true_sentences(states[1], "crony")) + " Only crony remains."
    moves = [{"guess": "salet", "failure": None, "text": truthful_answer(states[0], "salet")},
             {"guess": "crony", "failure": None, "text": format_answer(partly_true, "crony")},
             {"guess": "fudge", "failure": None, "text": truthful_answer(states[2], "fudge")},
             {"guess": "fudge", "failure": ALREADY_GUESSED, "text": format_answer("Only fudge remains.", "fudge")},
             {"guess": "bunny", "failure": None, "text": truthful_answer(states[3], "bunny")}]
    counts = game_counts({"per_game": [{"secret": "bunny", "moves": moves}]})
    crony_score = check_thought(states[1], partly_true, "crony").score
    assert 0 < crony_score < 1
    assert counts["bunny"]["thought_true_share"] == pytest.approx((3 + crony_score, 4))
    assert counts["bunny"]["thought_all_true"] == (3, 4)
    assert counts["bunny"]["one_left_names_secret"] == (1, 2) and counts["bunny"]["one_left_names_earlier_guess"] == (1, 2)
    assert rates(counts)["thought_all_true"] == {"rate": 0.75, "answers": 4}


def test_naming_tilt_scores_every_word_by_the_reward_kernels_fit(tiny_model_dir, setup):  # noqa: F811
    """studies/naming_tilt.py: each word's fit is the reward's `fit` component (1 for the secret),
    the context stops at ` Only` with the word next, and steps on the tilted loss move the
    words' probabilities toward the ones that fit."""
    import mlx.nn as nn
    import mlx.optimizers as optim

    from rl.reward import RewardWeights
    from sft.cot import truthful_answer
    from sft.lora import AdapterSettings, attach_adapter
    from studies.naming_tilt import (anchored_loss, answer_sequence, fit_shares, naming_context, tilted_loss, word_logits,
                                     word_tokens)

    position = position_at(setup, "bunny", ["salet", "crony", "fudge"])
    words = ["bunny", "crane", "funny", "sunny", "lowly"]
    rows = np.array([setup.lists.index(w) for w in words], dtype=np.int64)
    fits = fit_shares(position.state, rows)
    scorer = RewardScorer(setup, RewardWeights(fit=1.0))
    answers = [format_answer("x", w) for w in words]
    assert np.allclose(fits, scorer.score(answers, position.state).component("fit"))
    assert fits[0] == 1.0 and fits[1] < 1.0
    model, tokenizer = load_model(str(tiny_model_dir))
    context = naming_context(tokenizer, position)
    answer = truthful_answer(position.state, "bunny")
    assert tokenizer.decode(context).endswith(answer[:answer.rindex(" bunny remains.")])
    token_ids, kept = word_tokens(tokenizer, list(setup.lists.allowed[:400]))
    assert all(tokenizer.encode(" " + w, add_special_tokens=False) == [t] for w, t in zip(kept, token_ids))
    ids = mx.array(np.arange(20, dtype=np.int64))
    word_fits = mx.array(np.linspace(0, 1, 20, dtype=np.float32)[None])
    mx.random.seed(0)
    attach_adapter(model, AdapterSettings())
    step = nn.value_and_grad(model, tilted_loss)
    optimizer = optim.Adam(learning_rate=1e-2)

    def fitting_share() -> float:
        probs = mx.softmax(word_logits(model, [context], ids), axis=-1)
        return float((probs * word_fits).sum())

    before = fitting_share()
    for _ in range(3):
        _, grads = step(model, [context], ids, word_fits, 0.05)
        optimizer.update(model, grads)
        mx.eval(model.parameters())
    assert fitting_share() > before

    # --anchor: the same tilt read off the whole answer, plus the NLL of its other tokens
    tokens, start, named = sequence = answer_sequence(tokenizer, position)
    assert tokens[:named] == context and tokenizer.decode(tokens[start:]) == answer
    total, tilt, anchor_nll = anchored_loss(model, [sequence], ids, word_fits, 0.05, False, 0.5)
    assert float(tilt) == pytest.approx(float(tilted_loss(model, [context], ids, word_fits, 0.05)), rel=1e-4)
    log_probs = np.array(nn.log_softmax(model(mx.array([tokens]))[0].astype(mx.float32), axis=-1))
    others = [t for t in range(start, len(tokens)) if t != named]
    assert float(anchor_nll) == pytest.approx(-np.mean([log_probs[t - 1, tokens[t]] for t in others]), rel=1e-4)
    assert float(total) == pytest.approx(float(tilt) + 0.5 * float(anchor_nll), rel=1e-5)


def test_centred_naming_tilt_moves_no_word_on_average_over_the_batch():
    """studies/naming_tilt.py --center: the gradient on the logits is p - q less its mean over the
    batch's positions (each word's column sums to 0); the value is the plain cross-entropy."""
    from studies.naming_tilt import tilted_objective

    logits = mx.array(np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32))
    fits = mx.array(np.random.default_rng(1).uniform(size=(4, 6)).astype(np.float32))
    plain_value, plain = mx.value_and_grad(lambda x: tilted_objective(x, fits, 0.1))(logits)
    centred_value, centred = mx.value_and_grad(lambda x: tilted_objective(x, fits, 0.1, center=True))(logits)
    assert float(centred_value) == pytest.approx(float(plain_value))
    push = np.array(plain) * 4  # the mean over 4 positions divides p - q by 4
    assert np.allclose(np.array(centred) * 4, push - push.mean(axis=0, keepdims=True), atol=1e-6)
    assert np.allclose(np.array(centred).sum(axis=0), 0, atol=1e-6)
    assert not np.allclose(np.array(plain).sum(axis=0), 0, atol=1e-3)


def test_naming_probe_readout_starts_at_the_models_logits_and_keeps_its_states_by_position(setup, tmp_path):
    """studies/naming_probe.py: with the correction at zero the readout gives E h (the model's own
    word logits), secret probabilities are read per position, saved states are refused for
    other positions, and a longer draw adds only the positions the file lacks."""
    import click

    from studies.naming_probe import (complete_states, floor_guessed, guessed_mask, guessed_probability, load_states,
                                      readout_logits, save_states, secret_probabilities, spelling_features)

    rng = np.random.default_rng(0)
    states = mx.array(rng.normal(size=(3, 8)).astype(np.float32))
    embeddings = mx.array(rng.normal(size=(5, 8)).astype(np.float32))
    down = mx.array(rng.normal(size=(2, 8)).astype(np.float32))
    base = np.array(states @ embeddings.T)
    assert np.allclose(np.array(readout_logits(states, embeddings, down, mx.zeros((8, 2)))), base, atol=1e-5)
    up = mx.array(rng.normal(size=(8, 2)).astype(np.float32))
    corrected = np.array(readout_logits(states, embeddings, down, up))
    assert np.allclose(corrected, np.array((states + states @ (up @ down).T) @ embeddings.T), atol=1e-4)
    offsets = mx.array([0.0, -np.log(2), -np.log(2), 0.0, -np.log(3)], dtype=mx.float32)  # words sharing a first token
    shared = np.array(readout_logits(states, embeddings, down, up, offsets=offsets))
    assert np.allclose(shared, corrected + np.array(offsets), atol=1e-5)
    features = spelling_features(["bunny", "crane"])
    assert features.shape == (2, 156) and features[0].sum() == 9 and features[1].sum() == 10
    assert features[0, 1] == 1 and features[0, 26 + 20] == 1 and features[0, 130 + 13] == 1  # b at 1, u at 2, holds n
    probs = secret_probabilities(base, np.array([0, 4, 2]))
    softmax = np.exp(base) / np.exp(base).sum(axis=1, keepdims=True)
    assert np.allclose(probs, softmax[[0, 1, 2], [0, 4, 2]], atol=1e-6)

    bunny, funny = position_at(setup, "bunny", ["salet", "crony", "fudge"]), position_at(setup, "funny", ["salet"])
    one = (np.ones((1, 8), np.float32), np.ones((1, 5)), np.array([3]), np.array([bunny.key]))
    path = str(tmp_path / "states.npz")
    save_states(path, {"train": one})
    loaded = load_states(path, {"train": [bunny]})
    assert np.array_equal(loaded["train"][0], one[0]) and loaded["train"][2].tolist() == [3]
    with pytest.raises(click.UsageError):
        load_states(path, {"train": [funny]})

    # a longer draw of the same order keeps the saved positions and gathers only the rest
    gathered = []

    def gather(positions):
        gathered.extend(p.key for p in positions)
        return (np.full((len(positions), 8), 2, np.float32), np.zeros((len(positions), 5)),
                np.array([1] * len(positions)), np.array([p.key for p in positions]))

    assert complete_states(loaded, {"train": [bunny, funny]}, gather)
    assert gathered == [funny.key] and loaded["train"][2].tolist() == [3, 1]
    assert not complete_states(loaded, {"train": [bunny]}, gather) and gathered == [funny.key]
    save_states(path, loaded)
    assert list(load_states(path, {"train": [bunny]})["train"][3]) == [bunny.key, funny.key]

    # the target scores a word already guessed the floor, as the reward scores a repeat
    words = ["crony", "bunny", "salet", "pansy"]
    floored = floor_guessed(np.full((2, 4), 0.8), [bunny, funny], words)
    assert floored.tolist() == [[0.0, 0.8, 0.0, 0.8], [0.8, 0.8, 0.0, 0.8]]
    logits = np.log(np.array([[0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]]))
    assert guessed_probability(logits, guessed_mask([bunny, funny], words)) == pytest.approx((0.3 + 0.25) / 2)


def test_naming_probe_readout_attached_to_the_model_gives_the_fitted_logits(tiny_model_dir, tmp_path):  # noqa: F811
    """studies/naming_probe.py --sample-endgame: the readout after the final norm gives, at every
    position, exactly the logits the fit scored (E (h + up down h)); a zero readout is the model."""
    import click

    from studies.naming_probe import WordReadout, attach_readout, readout_logits, spelling_features

    model, _ = load_model(str(tiny_model_dir))
    ids = mx.array([[3, 7, 11, 5]])
    states = model.model(ids)[0]
    base = np.array(model(ids)[0])
    hidden = states.shape[-1]
    rng = np.random.default_rng(0)
    down, up = rng.normal(size=(4, hidden)).astype(np.float32), rng.normal(size=(hidden, 4)).astype(np.float32) * 0.1
    np.savez(tmp_path / "zero.npz", down=down, up=np.zeros_like(up))
    np.savez(tmp_path / "readout.npz", down=down, up=up)
    attach_readout(model, str(tmp_path / "zero.npz"))
    assert np.allclose(np.array(model(ids)[0]), base, atol=1e-5)
    model, _ = load_model(str(tiny_model_dir))
    attach_readout(model, str(tmp_path / "readout.npz"))
    embeddings = model.model.embed_tokens.weight
    expected = np.array(readout_logits(states, embeddings, mx.array(down), mx.array(up)))
    assert np.allclose(np.array(model(ids)[0]), expected, atol=1e-4)
    assert not np.allclose(expected, base, atol=1e-3)

    model, _ = load_model(str(tiny_model_dir))
    attach_readout(model, str(tmp_path / "readout.npz"), gate_token=7)  # as if token 7 were ` Only`
    gated = np.array(model(ids)[0])
    assert np.allclose(gated[1], expected[1], atol=1e-4)
    assert np.allclose(gated[[0, 2, 3]], base[[0, 2, 3]], atol=1e-5)

    # --attach naming-words: only the words' logits move, only at the gate, by what the fit scored
    model, _ = load_model(str(tiny_model_dir))
    word_ids = np.array([2, 5, 9, 13])
    words_only = np.array(WordReadout(model, mx.array(down), mx.array(up), 7, mx.array(word_ids))(ids)[0])
    fitted = np.array(readout_logits(states, embeddings[mx.array(word_ids)], mx.array(down), mx.array(up)))
    assert np.allclose(words_only[1, word_ids], fitted[1], atol=1e-4)
    others = np.setdiff1d(np.arange(base.shape[1]), word_ids)
    assert np.allclose(words_only[1, others], base[1, others], atol=1e-5)
    assert np.allclose(words_only[[0, 2, 3]], base[[0, 2, 3]], atol=1e-5)

    # --spelling: the words' logits gain their letters' scores, and the readout refuses the state
    spelling = mx.array(spelling_features(["crane", "slate", "pansy", "bunny"]))
    letters = mx.array(rng.normal(size=(spelling.shape[1], hidden)).astype(np.float32))
    spelled = np.array(WordReadout(model, mx.array(down), mx.array(up), 7, mx.array(word_ids), letters,
                                   spelling)(ids)[0])
    scores = np.array(states @ letters.T)[1]
    assert np.allclose(spelled[1, word_ids], fitted[1] + np.array(spelling) @ scores, atol=1e-3)
    assert np.allclose(spelled[[0, 2, 3]], base[[0, 2, 3]], atol=1e-5)
    np.savez(tmp_path / "spelled.npz", down=down, up=up, letters=np.array(letters))
    with pytest.raises(click.UsageError):
        attach_readout(model, str(tmp_path / "spelled.npz"))


def test_naming_states_are_each_contexts_last_state_whatever_the_batch_and_streams(setup, tiny_model_dir):  # noqa: F811
    """rl/naming_head.py: batching by length pads and reorders, and on a CPU the passes spread over
    one stream a core with llm/vector_exp.py's exp, yet each position's state is its own context's
    final state at the naming token, in the positions' order."""
    from rl.naming_head import naming_states
    from studies.naming_tilt import naming_context, one_candidate_positions

    model, tokenizer = load_model(str(tiny_model_dir))
    positions = one_candidate_positions(setup, ["bunny", "crony", "fudge", "pansy"], 3, seed=0)
    alone = np.stack([np.array(model.model(mx.array([naming_context(tokenizer, p)]))[0, -1]) for p in positions])
    assert np.allclose(naming_states(model, tokenizer, positions, batch=2, spread=False, vector=False), alone,
                       atol=1e-4)
    for batch in (None, 2):
        assert np.allclose(naming_states(model, tokenizer, positions, batch=batch), alone, atol=1e-4)


def test_closing_by_tokens_splits_one_candidate_closes_by_the_secrets_tokens():
    """studies/closing_by_tokens.py: only one-candidate positions count, split by the secret."""
    from studies.closing_by_tokens import closing_by_tokens

    records = [{"secret": "crony", "candidates": 1, "closed": True},
               {"secret": "crony", "candidates": 2, "closed": True},
               {"secret": "agape", "candidates": 1, "closed": False},
               {"secret": "bunny", "candidates": 1, "closed": False}]
    for i, record in enumerate(records):
        record["key"] = str(i)
    assert closing_by_tokens({"per_position": records}, {"crony", "bunny"}) == {
        "one_token": {"positions": 2, "closed": 1}, "several_tokens": {"positions": 1, "closed": 0}}
    before = [dict(r, closed=not r["closed"]) for r in records]
    paired = closing_by_tokens({"per_position": records}, {"crony", "bunny"}, {"per_position": before})
    assert paired["one_token"] | {"sign_test_p": 0} == {"positions": 2, "closed": 1, "closed_here_only": 1,
                                                          "closed_in_baseline_only": 1, "sign_test_p": 0}
    assert paired["one_token"]["sign_test_p"] == pytest.approx(1.0)


def test_wins_by_tokens_pairs_games_by_secret_and_refuses_other_secrets():
    """studies/closing_by_tokens.py on whole games: wins split by the secret's tokens, paired game
    by game with a baseline on the same secrets; other secrets are one clear error."""
    from common.errors import UserError
    from studies.closing_by_tokens import wins_by_tokens

    games = [{"secret": s, "won": w} for s, w in (("crony", True), ("agape", True), ("bunny", False), ("crony", True))]
    before = [dict(g, won=g["secret"] == "agape") for g in games]
    table = wins_by_tokens({"per_game": games}, {"crony", "bunny"}, {"per_game": before})
    assert table["one_token"] == {"games": 3, "wins": 2, "won_here_only": 2, "won_in_baseline_only": 0,
                                  "sign_test_p": 0.5}
    assert table["several_tokens"] | {"sign_test_p": 0} == {"games": 1, "wins": 1, "won_here_only": 0,
                                                            "won_in_baseline_only": 0, "sign_test_p": 0}
    with pytest.raises(UserError, match="same secrets"):
        wins_by_tokens({"per_game": games}, set(), {"per_game": before[::-1]})


def test_spelling_probe_reads_letters_that_the_features_carry():
    """studies/spelling_probe.py: letters coded into the features are read back on unseen words;
    features without them are read at no better than the most common letter."""
    from studies.spelling_probe import fit_letter_probe, letter_accuracy, letter_classes

    words = ["crane", "slate", "pansy", "bunny", "fudge", "crony", "spied", "puree"] * 4
    letters = letter_classes(words)
    assert letters[0].tolist() == [2, 17, 0, 13, 4]
    one_hot = np.zeros((len(words), 5 * 26), np.float32)
    for i, row in enumerate(letters):
        one_hot[i, np.arange(5) * 26 + row] = 1
    weights, bias = fit_letter_probe(one_hot[:24], letters[:24], epochs=200, lr=0.05, weight_decay=0.0, seed=0)
    assert letter_accuracy(one_hot[24:], letters[24:], weights, bias)["words_right"] == 1.0
    noise = np.random.default_rng(0).normal(size=one_hot.shape).astype(np.float32)
    weights, bias = fit_letter_probe(noise[:24], letters[:24], epochs=200, lr=0.05, weight_decay=0.0, seed=0)
    assert letter_accuracy(noise[24:], letters[24:], weights, bias)["words_right"] < 0.5


def test_word_steering_names_whole_words_by_their_scores_and_never_a_banned_one(tiny_model_dir):  # noqa: F811
    """llm/word_steering.py: at the gate token each answer names a whole word (its tokens in
    order, several-token words too) by the published scores, skipping its own banned words;
    an answer whose input is not the gate is the model's; several answers keep their own rows."""
    from llm.generation import SamplingSettings, sample
    import mlx.nn as nn

    from llm.word_steering import ScorePublisher, WordSteering, WordTokens
    from studies.word_steering import continuation_offsets

    model, tokenizer = load_model(str(tiny_model_dir))
    words = ["crane", "slate", "jumpy", "vowel", "ghost"]
    vocabulary = WordTokens.of(tokenizer, words)
    assert [len(s) for s in vocabulary.sequences] == [len(tokenizer.encode(" " + w, add_special_tokens=False))
                                                       for w in words]
    assert any(len(s) > 1 for s in vocabulary.sequences)
    shared = (vocabulary.first[:, None] == vocabulary.first[None]).sum(1)
    assert np.allclose(vocabulary.offsets, -np.log(shared))

    # the model's own shares of a first token: they sum to one over its words, in the ratio of
    # the model's continuations (words sharing " v" here, so one of them is not even)
    pairs = WordTokens.of(tokenizer, ["vowel", "vapid", "verge", "crane"])
    assert len(set(pairs.first[:3].tolist())) == 1
    offsets = continuation_offsets(model, tokenizer, pairs, batch=2)
    assert np.exp(offsets[:3]).sum() == pytest.approx(1.0, abs=1e-5) and offsets[3] == pytest.approx(0.0, abs=1e-6)
    prefix = tokenizer.encode("Only", add_special_tokens=False)

    def continuation(word: int) -> float:
        tokens = prefix + list(pairs.sequences[word])
        log_probs = np.array(nn.log_softmax(model(mx.array([tokens]))[0].astype(mx.float32), axis=-1))
        return sum(log_probs[j, tokens[j + 1]] for j in range(len(prefix), len(tokens) - 1))

    assert offsets[0] - offsets[1] == pytest.approx(continuation(0) - continuation(1), abs=1e-3)

    ranking = np.array([0.0, 40.0, 60.0, 20.0, -10.0], np.float32)  # jumpy, then slate, then vowel
    gate = tokenizer.encode(" the", add_special_tokens=False)[-1]
    publisher = ScorePublisher(model, lambda h: mx.broadcast_to(mx.array(ranking), (h.shape[0], len(words))), (gate,))
    prompt = tokenizer.encode("Turn 1 of 6. Only the", add_special_tokens=False)
    assert prompt[-1] == gate
    free = tokenizer.encode("Turn 1 of 6.", add_special_tokens=False)
    bans = [set(), {"jumpy"}, {"jumpy", "slate"}, set()]
    processors = [WordSteering(publisher, vocabulary, banned) for banned in bans]
    settings = SamplingSettings(temperature=0.0, max_tokens=8)  # greedy: the free answer is comparable alone
    answers = sample(publisher, tokenizer, [prompt, prompt, prompt, free], 1, settings, 4, processors)
    for (answer,), expected, processor in zip(answers[:3], ["jumpy", "slate", "vowel"], processors):
        sequence = vocabulary.sequences[words.index(expected)]
        assert answer.tokens[:len(sequence)] == sequence
        # what head RL trains at: the state the word was named from, and the word (rl/head_games.py)
        assert processor.named == words.index(expected) and processor.state.shape == (model.args.hidden_size,)
    assert processors[3].state is None and processors[3].named is None
    (unsteered,), = sample(model, tokenizer, [free], 1, settings)
    assert answers[3][0].tokens == unsteered.tokens


def test_state_probe_reads_letters_from_states_that_hold_them_and_not_from_noise():
    """studies/state_probe.py: a probe scores a state by how well it names the secret's letter at
    each place on held-out positions: 1.0 from states that spell the secret, near chance from noise."""
    from llm.naming_head import spelling_features
    from studies.state_probe import probe

    rng = np.random.default_rng(0)
    words = np.array(["crane", "slate", "pious", "dwelt", "mango", "fjord", "quirk", "bylaw"] * 40)
    spelled = spelling_features(list(words)) + 0.01 * rng.normal(size=(len(words), 156))
    train, validation = slice(0, 240), slice(240, None)
    exact = probe(spelled[train], spelled[validation], words[train], words[validation])
    assert exact["accuracy_by_place"] == [1.0] * 5 and exact["mean_accuracy"] == 1.0
    noise = rng.normal(size=(len(words), 156))
    assert probe(noise[train], noise[validation], words[train], words[validation])["mean_accuracy"] < 0.4
