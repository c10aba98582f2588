"""gen-sft: every thought is true, splits are clean, files load in datasets and mlx-lm, runs repeat.

The thought checker re-derives each statement from the raw feedback with the feedback
kernel over whole word lists (not from `Constraints` or `GameState`, which wrote the
text), so a wrong fact, count, candidate list or bit figure fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401

from cli import cli
from eval.splits import SFT_SPLITS as SPLITS, is_held_out, sft_split_of as split_of, trainable
from llm.format import (REJECTION_REASONS, SYSTEM_PROMPT, TILE_WORDS, Rejection, format_answer, parse_answer,
                        render_state)
from sft.cot import expert_answer
from sft.gen_data import secrets_by_split
from llm.histories import SOLVER
from sft.states import sample_start_states
from solver.feedback import digits_to_pattern, feedback
from solver.matrix import build_pattern_matrix
from solver.policy import CandidatePolicy, SolverSettings
from solver.setup import load_setup
from solver.state import MAX_GUESSES, state_from_history
from solver.words import encode

THOUGHT = re.compile(r"<think>(.*)</think><guess> ([a-z]{5})</guess>")
GUESS_LINE = re.compile(r"Guess (\d): ([a-z]{5}) -> (.*)")
REFUSED = re.compile(r"Not accepted: (.*?)\.(?:\n| You have)")
WORD_TIMES = {"once": 1, "twice": 2}


def run(*args: str):
    return CliRunner().invoke(cli, ["gen-sft", *args])


def gen(out: Path, *args: str, lists: tuple[Path, Path] | None = None) -> dict:
    word_lists = ["--answers", str(lists[0]), "--allowed", str(lists[1])] if lists else []
    result = run("--out", str(out), "--quiet", "--json", str(out.parent / f"{out.name}.json"), *word_lists, *args)
    assert result.exit_code == 0, result.output
    return json.loads((out.parent / f"{out.name}.json").read_text())


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def small_setup(small_lists_files):
    return load_setup("answers", str(small_lists_files[0]), str(small_lists_files[1]))


@pytest.fixture(scope="module")
def small_data(tmp_path_factory, small_lists_files, tiny_model_dir):  # noqa: F811
    out = tmp_path_factory.mktemp("gen") / "data"
    summary = gen(out, "--games", "320", "--seed", "7", "--model", str(tiny_model_dir), lists=small_lists_files)
    return out, summary


# -- the thought checker ---------------------------------------------------------------

def refused_in_prompt(user: str, state, lists, seen: set[str]) -> tuple[Rejection, ...]:
    """The prompt's "Not accepted:" answers; each must really be refused at `state` for the
    reason given (the parser is the judge), and never be what the solver then plays."""
    match = REFUSED.search(user)
    if match is None:
        return ()
    refused = []
    for word, reason in re.findall(r"([a-z]+) \(([^)]+)\)", match.group(1)):
        failure = next(kind for kind, text in REJECTION_REASONS.items() if text == reason)
        assert parse_answer(format_answer("x", word), lists, state.guesses).failure == failure, (word, reason)
        refused.append(Rejection(word, failure))
        seen.add(f"refused {failure}")
    assert 1 <= len(refused) <= 2
    return tuple(refused)


def state_from_prompt(setup, user: str, secret: str, seen: set[str] | None = None):
    """Rebuild the position from the prompt text; each tile must be the real feedback for `secret`."""
    history = []
    for line in user.splitlines():
        match = GUESS_LINE.fullmatch(line)
        if match:
            word = match.group(2)
            tiles = [TILE_WORDS.index(tile.split()[1]) for tile in match.group(3).split(", ")]
            assert int(match.group(1)) == len(history) + 1
            assert digits_to_pattern(tiles) == feedback(word, secret), (word, secret)
            history.append((word, digits_to_pattern(tiles)))
    state = state_from_history(setup.lists, setup.matrix, history, setup.secret_kind)
    refused = refused_in_prompt(user, state, setup.lists, set() if seen is None else seen)
    assert render_state(state, refused) == user  # the prompt is exactly llm.format's rendering
    return state


def fits(words: tuple[str, ...], state) -> list[str]:
    """The words that would have produced every tile shown so far (feedback kernel, whole list)."""
    if not state.turns:
        return list(words)
    patterns = build_pattern_matrix(encode(state.guesses), encode(list(words)))
    ok = np.all(patterns == np.array([t.pattern for t in state.turns])[:, None], axis=0)
    return [w for w, keep in zip(words, ok) if keep]


def letters(text: str) -> list[str]:
    return [part.lower() for part in text.split(", ")]


def positions(text: str) -> list[int]:
    return [int(p) - 1 for p in re.split(r", | or ", text)]


def check_thought(thought: str, guess: str, state, lists, seen: set[str]) -> None:
    """Every sentence of `thought` must be true at `state`; `seen` collects the kinds checked."""
    fitting = fits(lists.allowed, state)  # feedback facts must hold for every word that fits it
    candidates = fits(state.secret_words, state)
    assert fitting and candidates
    count_statements, absent_stated = 0, False
    for sentence in re.split(r"(?<=\.) ", thought):
        if sentence == "No feedback yet.":
            assert not state.turns
            seen.add("start")
        elif m := re.fullmatch(r"Pattern: ([A-Z_]{5})\.", sentence):
            placed = {i: c.lower() for i, c in enumerate(m.group(1)) if c != "_"}
            assert placed and all(w[i] == c for w in fitting for i, c in placed.items()), sentence
            seen.add("pattern")
        elif m := re.fullmatch(r"([A-Z]): (.+)\.", sentence):
            letter = m.group(1).lower()
            for detail in m.group(2).split(", not at "):
                if detail == "in the word":
                    assert all(letter in w for w in fitting), sentence
                elif d := re.fullmatch(r"exactly (once|twice|\d times)", detail):
                    n = WORD_TIMES.get(d.group(1)) or int(d.group(1).split()[0])
                    assert all(w.count(letter) == n for w in fitting), sentence
                    seen.add("exact count")
                elif d := re.fullmatch(r"at least (twice|\d times)", detail):
                    n = WORD_TIMES.get(d.group(1)) or int(d.group(1).split()[0])
                    assert all(w.count(letter) >= n for w in fitting), sentence
                    seen.add("at least")
                elif re.fullmatch(r"\d(, \d)*( or \d)?", detail):
                    assert all(w[p] != letter for w in fitting for p in positions(detail)), sentence
                    seen.add("not at")
                elif detail.startswith("not at "):
                    assert all(w[p] != letter for w in fitting for p in positions(detail[7:])), sentence
                    seen.add("not at")
                else:
                    raise AssertionError(f"unknown letter fact {detail!r} in {sentence!r}")
        elif m := re.fullmatch(r"Absent: ([A-Z](?:, [A-Z])*)\.", sentence):
            absent = letters(m.group(1))
            assert not any(c in w for w in fitting for c in absent), sentence
            # and complete: a letter played but in no fitting word was grey every time
            assert set(absent) == set("".join(state.guesses)) - set("".join(fitting)), sentence
            absent_stated = True
            seen.add("absent")
        elif m := re.fullmatch(r"(\d+) possible words\.", sentence):
            assert int(m.group(1)) == len(candidates) > 6, sentence
            count_statements += 1
        elif m := re.fullmatch(r"(\d+) possible words: ([a-z]{5}(?:, [a-z]{5})*)\.", sentence):
            assert int(m.group(1)) == len(candidates) <= 6 and m.group(2).split(", ") == candidates, sentence
            count_statements += 1
            seen.add("listed")
        elif m := re.fullmatch(r"Only ([a-z]{5}) remains\.", sentence):
            assert candidates == [m.group(1)] == [guess], sentence
            count_statements += 1
            seen.add("only")
        elif m := re.fullmatch(r"([a-z]{5}): (\d+\.\d) bits, ~(\d+\.\d) words left; "
                               r"(could be the answer|not a possible answer)\.", sentence):
            assert m.group(1) == guess and len(candidates) > 1
            buckets = np.unique(build_pattern_matrix(encode([guess]), encode(candidates))[0], return_counts=True)[1]
            p = buckets / len(candidates)
            assert abs(float(m.group(2)) - float(-(p * np.log2(p)).sum())) <= 0.05 + 1e-9, sentence
            assert abs(float(m.group(3)) - float((buckets ** 2).sum() / len(candidates))) <= 0.05 + 1e-9, sentence
            assert (m.group(4) == "could be the answer") == (guess in candidates), sentence
            seen.add("bits")
        else:
            raise AssertionError(f"unchecked sentence {sentence!r}")
    assert count_statements == 1, thought
    assert absent_stated or not set("".join(state.guesses)) - set("".join(fitting)), thought


def check_examples(setup, solver, rows: list[tuple[str, list[dict]]]) -> set[str]:
    """Rebuild, re-solve and fact-check every (secret, messages) example; returns the kinds seen."""
    seen: set[str] = set()
    for secret, messages in rows:
        system, user, assistant = messages
        assert [m["role"] for m in messages] == ["system", "user", "assistant"]
        assert system["content"] == SYSTEM_PROMPT
        state = state_from_prompt(setup, user["content"], secret, seen)
        assert not state.over
        thought, guess = THOUGHT.fullmatch(assistant["content"]).groups()
        assert guess == solver.choose(state)  # the target is the expert's move
        assert parse_answer(assistant["content"], setup.lists, state.guesses).ok
        check_thought(thought, guess, state, setup.lists, seen)
    return seen


# -- tests ----------------------------------------------------------------------------------

def test_every_thought_is_true_and_every_guess_is_the_solvers(small_data, small_setup):
    out, summary = small_data
    hf = __import__("datasets").load_from_disk(str(out / "hf"))
    rows = [(r["secret"], r["messages"]) for split in SPLITS for r in hf[split]]
    assert len(rows) == summary["examples"] > 400
    seen = check_examples(small_setup, small_setup.solver(SolverSettings()), rows)
    assert seen >= {"start", "pattern", "not at", "absent", "listed", "only", "bits", "exact count",
                    "refused not_five_letters", "refused not_allowed", "refused already_guessed"}
    refused = summary["splits"]["all"]["rejected_examples"]
    assert 0.12 < refused / summary["examples"] < 0.28  # --rejected 0.2 by default
    turns = {r["turns"] for split in SPLITS for r in hf[split]}
    assert turns == set(range(MAX_GUESSES))  # 0..5 earlier turns with --max-history 5
    assert summary["splits"]["all"]["off_policy_examples"] > 100


@pytest.mark.parametrize("flags", [["--hard", "--lookahead"], ["--secrets", "allowed", "--max-history", "2"]])
def test_thoughts_hold_for_other_solvers_and_secret_lists(tmp_path, small_lists_files, flags):
    summary = gen(tmp_path / "data", "--games", "60", "--seed", "3", *flags, lists=small_lists_files)
    kind = "allowed" if "allowed" in flags else "answers"
    setup = load_setup(kind, str(small_lists_files[0]), str(small_lists_files[1]))
    solver = setup.solver(SolverSettings(hard="--hard" in flags, lookahead="--lookahead" in flags))
    assert summary["solver"]["name"] == solver.name
    hf = __import__("datasets").load_from_disk(str(tmp_path / "data" / "hf"))
    rows = [(r["secret"], r["messages"]) for split in SPLITS for r in hf[split]]
    check_examples(setup, solver, rows)
    if "--max-history" in flags:
        assert max(r["turns"] for split in SPLITS for r in hf[split]) == 2


def test_candidates_expert_teaches_only_words_that_fit_the_clues(tmp_path, small_lists_files, small_setup):
    summary = gen(tmp_path / "data", "--games", "60", "--seed", "3", "--expert", "candidates", lists=small_lists_files)
    assert summary["solver"]["expert"] == "candidates"
    hf = __import__("datasets").load_from_disk(str(tmp_path / "data" / "hf"))
    rows = [(r["secret"], r["messages"]) for split in SPLITS for r in hf[split]]
    check_examples(small_setup, CandidatePolicy(small_setup.solver(SolverSettings())), rows)
    for secret, (_, user, assistant) in rows:
        state = state_from_prompt(small_setup, user["content"], secret)
        guess = THOUGHT.fullmatch(assistant["content"]).group(2)
        assert guess in fits(small_setup.lists.answers, state)  # could be the secret: consistent, an answer
        assert "could be the answer" in assistant["content"] or "Only" in assistant["content"]


def test_thoughts_on_the_default_lists(tmp_path):
    summary = gen(tmp_path / "data", "--games", "30", "--seed", "5")
    setup = load_setup()
    hf = __import__("datasets").load_from_disk(str(tmp_path / "data" / "hf"))
    rows = [(r["secret"], r["messages"]) for split in SPLITS for r in hf[split]]
    assert len(rows) == summary["examples"] > 30
    check_examples(setup, setup.solver(), rows)
    # no tokenizer in this test's cache: token counts are the documented character-based estimate
    assert summary["tokenizer"].startswith("approximate")
    chars = sum(len(m["content"]) for _, messages in rows for m in messages[:2])
    assert summary["splits"]["all"]["prompt_tokens"]["total"] == pytest.approx(chars / 3.2, rel=0.01)


def test_same_seed_same_bytes_other_seed_other_data(tmp_path, small_lists_files):
    # "a" searches afresh (and stores its decisions), "b" replays them from disk, "b2" ignores them.
    runs = {name: gen(tmp_path / name, "--games", "50", "--seed", seed, *extra, lists=small_lists_files)
            for name, seed, extra in (("a", "11", ["--cold"]), ("b", "11", []), ("b2", "11", ["--cold"]),
                                      ("c", "12", []))}
    assert runs["b"]["stored_decisions_used"] > 0 and runs["b2"]["stored_decisions_used"] == 0
    for other in ("b", "b2"):
        for name in [f"{split}.jsonl" for split in SPLITS] + ["manifest.json"]:
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / other / name).read_bytes()
    assert (tmp_path / "a" / "train.jsonl").read_bytes() != (tmp_path / "c" / "train.jsonl").read_bytes()


def test_no_secret_in_two_splits_and_no_held_out_secret(small_data, small_setup):
    out, summary = small_data
    manifest = json.loads((out / "manifest.json").read_text())
    hf = __import__("datasets").load_from_disk(str(out / "hf"))
    used = {split: set(hf[split]["secret"]) for split in SPLITS}
    assert all(used[split] for split in SPLITS)
    assert {split: sorted(words) for split, words in used.items()} == manifest["secrets"]
    assert not (used["train"] & used["valid"]) and not (used["train"] & used["test"])
    assert not (used["valid"] & used["test"])
    assert not any(is_held_out(w) for words in used.values() for w in words)
    assert all(split_of(w) == split for split, words in used.items() for w in words)
    # On the shipped answers: the three pools partition exactly the trainable secrets, about 90/5/5.
    answers = load_setup().lists.answers
    pools = secrets_by_split(answers)
    assert sorted(w for pool in pools.values() for w in pool) == sorted(trainable(answers))
    assert all(60 < len(pools[split]) < 150 for split in ("valid", "test"))


def test_datasets_and_mlx_lm_read_the_files(small_data, tiny_model_dir):  # noqa: F811
    import datasets
    import mlx_lm
    from mlx_lm.tuner.datasets import CacheDataset, load_dataset
    from mlx_lm.tuner.trainer import iterate_batches

    out, summary = small_data
    hf = datasets.load_from_disk(str(out / "hf"))
    assert isinstance(hf, datasets.DatasetDict) and set(hf) == set(SPLITS)
    _, tokenizer = mlx_lm.load(str(tiny_model_dir))
    args = SimpleNamespace(data=str(out), train=True, test=True, mask_prompt=True, hf_dataset=None)
    loaded = dict(zip(SPLITS, load_dataset(args, tokenizer)))
    for split in SPLITS:
        lines = read_jsonl(out / f"{split}.jsonl")
        assert all(set(line) == {"messages"} for line in lines)
        assert [r["messages"] for r in hf[split]] == [line["messages"] for line in lines]
        assert len(loaded[split]) == len(lines) == summary["splits"][split]["examples"]
        prompt_lengths, answer_lengths = [], []
        for i, line in enumerate(lines):
            tokens, offset = loaded[split].process(loaded[split][i])
            answer = tokenizer.decode(tokens[offset:])
            assert answer.startswith(line["messages"][2]["content"])  # the mask covers exactly the prompt
            prompt_lengths.append(offset)
            answer_lengths.append(len(tokens) - offset)
        stats = summary["splits"][split]  # the manifest counts tokens the way mlx-lm's trainer sees them
        assert stats["prompt_tokens"]["max"] == max(prompt_lengths)
        assert stats["prompt_tokens"]["total"] == sum(prompt_lengths)
        assert stats["answer_tokens"]["total"] == sum(answer_lengths)
    assert summary["tokenizer"] == str(tiny_model_dir)
    batch, lengths = next(iterate_batches(CacheDataset(loaded["train"]), 4, 2048))
    assert batch.shape[0] == 4 and int(lengths[:, 0].min()) > 0  # prompt masked, answer trained


@pytest.mark.parametrize("args, message", [
    (["--games", "0"], "--games"),
    (["--games", "many"], "--games"),
    (["--secrets", "both"], "--secrets"),
    (["--max-history", "9"], "--max-history"),
    (["--off-policy", "2"], "--off-policy"),
    (["--answers", "/nonexistent/answers.txt"], "cannot read word list"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    result = run("--out", str(tmp_path / "data"), *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output
    assert not (tmp_path / "data").exists()


def test_existing_output_needs_overwrite(tmp_path, small_lists_files):
    out = tmp_path / "data"
    gen(out, "--games", "5", lists=small_lists_files)
    result = run("--out", str(out), "--games", "5", "--quiet")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "--overwrite" in lines[0], result.output
    (tmp_path / "file").write_text("x")
    result = run("--out", str(tmp_path / "file"), "--games", "5", "--quiet")
    assert result.exit_code == 2 and "is a file" in result.output
    gen(out, "--games", "6", "--overwrite", lists=small_lists_files)
    assert sorted(p.name for p in out.iterdir()) == ["hf", "manifest.json", "test.jsonl", "train.jsonl",
                                                     "valid.jsonl"]
    assert json.loads((out / "manifest.json").read_text())["games"] == 6
    # Not a dataset: --overwrite does not replace it (tests/test_run_folder.py).
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("keep me")
    result = run("--out", str(tmp_path / "notes"), "--games", "5", "--quiet", "--overwrite")
    assert result.exit_code == 2 and "holds other files (notes.txt)" in result.output
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["notes.txt"]


def test_start_states_for_rl(small_setup):
    solver = small_setup.solver()
    secrets = trainable(small_setup.lists.answers)
    starts = sample_start_states(small_setup, solver, secrets, 300, np.random.default_rng(1), max_history=4)
    again = sample_start_states(small_setup, solver, secrets, 300, np.random.default_rng(1), max_history=4)
    assert [(s.secret, s.state.guesses) for s in starts] == [(s.secret, s.state.guesses) for s in again]
    assert {len(s.state.turns) for s in starts} == {0, 1, 2, 3, 4}
    for start in starts:
        assert start.secret in secrets and not start.state.over
        assert start.secret in start.state.candidate_words()
        assert len(start.players) == len(start.state.turns)
        assert all(t.pattern == feedback(t.guess, start.secret) for t in start.state.turns)
    kinds = {p for s in starts for p in s.players}
    assert kinds == {"solver", "candidate", "random"}
    only_solver = sample_start_states(small_setup, solver, secrets, 50, np.random.default_rng(2), 4, off_policy=0.0)
    assert all(set(s.players) <= {SOLVER} for s in only_solver)


def test_expert_answer_names_the_last_candidate():
    setup = load_setup()
    solver = setup.solver()
    state = state_from_history(setup.lists, setup.matrix, [("salet", feedback("salet", "crane")),
                                                            ("crony", feedback("crony", "crane"))])
    answer = expert_answer(solver, state)
    assert len(state.candidates) == 1 and answer.endswith("Only crane remains.</think><guess> crane</guess>")
