"""SFT on the tiny model: training lowers the loss, a killed run resumes onto the same
trajectory, adapters load with mlx-lm, fusing is checked, and bad input fails in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)
from mlx.utils import tree_flatten

from cli import cli
from common.errors import UserError
from eval.splits import held_out, trainable
from llm.format import format_answer, messages
from llm.loading import load_model
from sft.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from sft.config import MAY_CHANGE
from sft.data import load_data_dir, prompt_of, tokenize
from sft.fuse import check_same_greedy, write_fused
from sft.lora import AdapterSettings, attach_adapter, continue_adapter, trainable_weights
from sft.trainer import OptimizerSettings, SFTTrainer, answer_loss_for, collate, output_split
from solver.setup import load_setup
from solver.words import default_word_lists

REPO = Path(__file__).resolve().parent.parent


# The tests' examples carry this short system prompt instead of the real one: in the
# tiny model's ~400-token vocabulary the real one is 305 tokens, and these tests run
# on the reference BLAS. Everything else is the real format.
SHORT_SYSTEM = "Play Wordle: reply <think>why</think><guess>word</guess>."


def solver_conversations(answers: Path, allowed: Path, games: int) -> list[list[dict]]:
    """Every position of `games` solver games as a chat: the prompt and the solver's move."""
    setup = load_setup("answers", str(answers), str(allowed))
    solver = setup.solver()
    conversations = []
    for secret in trainable(setup.lists.answers)[:games]:
        state, column = setup.start, setup.lists.answers.index(secret)
        while not state.over:
            guess = solver.choose(state)
            thought = f"{len(state.candidates)} words are still possible; {guess} splits them best."
            system, user = messages(state)
            answer = {"role": "assistant", "content": format_answer(thought, guess)}
            conversations.append([{**system, "content": SHORT_SYSTEM}, user, answer])
            state = state.play(guess, int(setup.matrix[setup.lists.index(guess), column]))
    return conversations


def write_jsonl(path: Path, conversations: list[list[dict]]) -> None:
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in conversations))


@pytest.fixture(scope="module")
def conversations(small_lists_files) -> list[list[dict]]:
    return solver_conversations(*small_lists_files, games=10)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, conversations) -> Path:
    folder = tmp_path_factory.mktemp("sft-data")
    write_jsonl(folder / "train.jsonl", conversations[8:])
    write_jsonl(folder / "valid.jsonl", conversations[:8])
    return folder


def sft(*args: str):
    return CliRunner().invoke(cli, ["sft", *args])


def tiny_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["--model", str(model), "--data", str(data), "--out", str(out), "--lr", "3e-3", "--batch-size", "2",
            "--quiet", *extra]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model_dir, data_dir) -> Path:  # noqa: F811
    """A short run with the live eval, checkpoints and --fuse, shared by the tests below."""
    out = tmp_path_factory.mktemp("run") / "run"
    result = sft(*tiny_args(tiny_model_dir, data_dir, out, "--iters", "6", "--eval-every", "3",
                            "--eval-games", "1", "--save-every", "3", "--fuse", "--json", str(out.parent / "s.json")))
    assert result.exit_code == 0, result.output + str(result.exception)
    return out


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


# --- training ------------------------------------------------------------------------


def test_prompt_is_masked_answer_is_learned(tiny_model_dir, conversations) -> None:  # noqa: F811
    _, tokenizer = load_model(str(tiny_model_dir))
    (tokens, offset), = tokenize(tokenizer, conversations[:1])
    prompt = tokenizer.apply_chat_template(prompt_of(conversations[0]), add_generation_prompt=True)
    assert offset == len(prompt) and tokens[:offset] == prompt
    assert tokenizer.decode(tokens[offset:]).startswith(conversations[0][-1]["content"])


def test_loss_counts_exactly_the_answer_tokens(tiny_model_dir, conversations) -> None:  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    examples = tokenize(tokenizer, conversations[:3])
    batch = collate(examples)
    loss, count = answer_loss_for(model)(model, batch.inputs, batch.answer_at, batch.weights)
    assert output_split(model) is not None  # the tiny llama runs its output layer on answer positions only
    assert count.item() == sum(len(tokens) - offset for tokens, offset in examples)

    # the same number from the whole model's logits and an explicit mask
    logits = model(batch.inputs[:, :-1])
    log_probs = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
    targets = np.array(batch.inputs[:, 1:])
    picked = [-log_probs[row, p - 1, targets[row, p - 1]]
              for row, (tokens, offset) in enumerate(examples) for p in range(offset, len(tokens))]
    assert loss.item() == pytest.approx(float(np.mean(picked)), rel=1e-5)


def test_a_few_steps_lower_the_loss_and_train_only_the_adapter(tiny_model_dir, conversations) -> None:  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    base = {k: mx.array(v) for k, v in tree_flatten(model.parameters())}
    mx.random.seed(0)
    attach_adapter(model, AdapterSettings(rank=4))
    trainer = SFTTrainer(model, tokenizer, OptimizerSettings(learning_rate=3e-3, total_steps=12, warmup_steps=2))
    valid = trainer.tokenize(conversations[:8])
    before = trainer.loss(valid, batch_size=4)
    stats = trainer.train_on_messages(conversations[8:], steps=12, batch_size=2, seed=1)
    after = trainer.loss(valid, batch_size=4)

    assert before > 5.0  # a random model over a ~400-token vocabulary: about ln(400) = 6
    assert after < before - 1.0, (before, after)  # answers at least e times likelier per token
    assert [s.step for s in stats] == list(range(1, 13)) and trainer.steps_done == 12
    assert stats[0].learning_rate == 0.0 and stats[2].learning_rate == pytest.approx(3e-3)  # warm-up, then peak
    assert stats[-1].learning_rate < 1e-3
    assert all(s.tokens > 0 and s.grad_norm > 0 for s in stats)
    # LoRA: every base weight untouched, only lora_a/lora_b trained (2 layers x 7 projections x 2)
    after_params = dict(tree_flatten(model.parameters()))
    for name, value in base.items():
        wrapped = name.replace(".weight", ".linear.weight") if name not in after_params else name
        assert mx.array_equal(after_params[wrapped], value), name
    assert len(trainable_weights(model)) == 28


def test_cli_run_writes_metrics_adapter_and_summary(finished_run: Path, tiny_model_dir) -> None:  # noqa: F811
    lines = metrics(finished_run)
    assert [r["step"] for r in lines] == list(range(0, 7))
    assert all({"loss", "lr", "tokens_per_s", "peak_memory_gb"} <= set(r) for r in lines[1:])
    measured = [r for r in lines if "val_loss" in r]
    assert [r["step"] for r in measured] == [0, 3, 6]
    assert all(r["eval_games"] == 1 and 0.0 <= r["eval_format_valid_rate"] <= 1.0 for r in measured)
    assert measured[-1]["val_loss"] < 0.85 * measured[0]["val_loss"]

    summary = json.loads((finished_run.parent / "s.json").read_text())
    assert summary["steps"] == 6 and summary["final_val_loss"] == measured[-1]["val_loss"]
    assert summary["tokens_per_s_median"] > 0 and summary["peak_memory_gb"] > 0
    assert set(summary["eval"]) >= {"eval_format_valid_rate", "eval_win_rate"}
    assert latest_checkpoint(finished_run).name == "step-0000006"
    assert sorted(p.name for p in (finished_run / "checkpoints").iterdir()) == ["step-0000003", "step-0000006"]


def test_adapter_loads_with_mlx_lm_and_with_load_model(finished_run: Path, tiny_model_dir) -> None:  # noqa: F811
    from mlx_lm import load

    config = json.loads((finished_run / "adapter" / "adapter_config.json").read_text())
    assert config["fine_tune_type"] == "lora" and config["num_layers"] == 2
    assert config["lora_parameters"] == {"rank": 8, "scale": 20.0, "dropout": 0.0}
    theirs, tokenizer = load(str(tiny_model_dir), adapter_path=str(finished_run / "adapter"))
    ours, _ = load_model(str(tiny_model_dir), adapter=finished_run / "adapter")
    base, _ = load_model(str(tiny_model_dir))
    ids = mx.array([tokenizer.encode("<think>3 words left</think><guess>crane</guess>")])
    assert mx.allclose(theirs(ids), ours(ids), atol=1e-5)
    assert float(mx.abs(ours(ids) - base(ids)).max()) > 0.1


def test_training_continues_from_an_adapter(finished_run, tiny_model_dir, data_dir, tmp_path) -> None:  # noqa: F811
    out = tmp_path / "more"
    result = sft(*tiny_args(tiny_model_dir, data_dir, out, "--adapter", str(finished_run / "adapter"), "--rank", "2",
                            "--iters", "2", "--eval-games", "0"))
    assert result.exit_code == 0, result.output + str(result.exception)
    before, after = metrics(finished_run), metrics(out)
    assert after[0]["val_loss"] == pytest.approx(before[-1]["val_loss"], abs=1e-4)  # starts where that run ended
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["lora_parameters"]["rank"] == 8  # the adapter's own rank, not --rank
    assert after[-1]["val_loss"] != after[0]["val_loss"]
    model, _ = load_model(str(tiny_model_dir), adapter=finished_run / "adapter")
    continue_adapter(model, finished_run / "adapter")
    assert sorted(trainable_weights(model)) == sorted(mx.load(str(finished_run / "adapter" / "adapters.safetensors")))


def test_full_fine_tune_writes_a_loadable_full_adapter(tiny_model_dir, data_dir, tmp_path) -> None:  # noqa: F811
    from mlx_lm import load

    out = tmp_path / "full"
    result = sft(*tiny_args(tiny_model_dir, data_dir, out, "--full", "--iters", "3", "--eval-games", "0"))
    assert result.exit_code == 0, result.output + str(result.exception)
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert (config["fine_tune_type"], config["num_layers"]) == ("full", 2)
    saved = mx.load(str(out / "adapter" / "adapters.safetensors"))
    assert len(saved) == 2 * 9  # per layer: 7 projections + 2 norms; embeddings stay frozen
    base, tokenizer = load_model(str(tiny_model_dir))
    tuned, _ = load(str(tiny_model_dir), adapter_path=str(out / "adapter"))
    ours, _ = load_model(str(tiny_model_dir), adapter=out / "adapter")
    ids = mx.array([tokenizer.encode("<guess>crane</guess>")])
    assert mx.allclose(tuned(ids), ours(ids), atol=1e-5)
    assert float(mx.abs(ours(ids) - base(ids)).max()) > 1e-2
    assert metrics(out)[-1]["val_loss"] < metrics(out)[0]["val_loss"]


def test_fused_model_answers_like_the_adapter(finished_run: Path, tiny_model_dir, conversations) -> None:  # noqa: F811
    fused_dir = finished_run / "fused"
    summary = json.loads((finished_run.parent / "s.json").read_text())
    assert summary["fused"]["prompts"] == 4 and summary["fused"]["max_logit_difference"] < 1e-3
    adapted, tokenizer = load_model(str(tiny_model_dir), adapter=finished_run / "adapter")
    fused, _ = load_model(str(fused_dir))
    assert not any("lora" in name for name, _ in tree_flatten(fused.parameters()))
    prompts = [tokenizer.apply_chat_template(prompt_of(c), add_generation_prompt=True) for c in conversations[-3:]]
    check = check_same_greedy(adapted, fused, tokenizer, prompts)
    assert check.tokens_compared >= 3

    # the check does catch a model that answers differently: the base model without the adapter
    base, _ = load_model(str(tiny_model_dir))
    with pytest.raises(UserError, match="answers sample prompt .* differently"):
        check_same_greedy(adapted, base, tokenizer, prompts)


def test_fuse_without_prompts_writes_nothing(finished_run: Path, tiny_model_dir, tmp_path) -> None:  # noqa: F811
    with pytest.raises(UserError, match="at least one sample prompt"):
        write_fused(str(tiny_model_dir), finished_run / "adapter", tmp_path / "fused", [])
    assert not (tmp_path / "fused").exists()


# --- checkpoints and resume ------------------------------------------------------------


def test_checkpoint_round_trip(tmp_path: Path, tiny_model_dir, conversations) -> None:  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    mx.random.seed(3)
    config = attach_adapter(model, AdapterSettings(rank=2))
    trainer = SFTTrainer(model, tokenizer, OptimizerSettings(learning_rate=1e-3, total_steps=10))
    trainer.train_on_messages(conversations[:8], steps=3, batch_size=4)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, model, trainer.optimizer, step, config, {"rng": [1, 2], "note": step})
    saved_weights = {k: mx.array(v) for k, v in trainable_weights(model).items()}
    saved_moments = {k: mx.array(v) for k, v in tree_flatten(trainer.optimizer.state)}
    next_draw = mx.random.uniform(shape=(4,))

    fresh, _ = load_model(str(tiny_model_dir))
    mx.random.seed(99)  # other LoRA init and RNG: the checkpoint must overwrite both
    attach_adapter(fresh, AdapterSettings(rank=2))
    other = SFTTrainer(fresh, tokenizer, OptimizerSettings(learning_rate=1e-3, total_steps=10))
    checkpoint = load_checkpoint(tmp_path, fresh, other.optimizer)

    assert (checkpoint.step, checkpoint.extra) == (3, {"rng": [1, 2], "note": 3})
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-0000002", "step-0000003"]
    assert all(mx.array_equal(trainable_weights(fresh)[k], v) for k, v in saved_weights.items())
    assert all(mx.array_equal(dict(tree_flatten(other.optimizer.state))[k], v) for k, v in saved_moments.items())
    assert other.steps_done == 3
    assert mx.array_equal(mx.random.uniform(shape=(4,)), next_draw)


def test_corrupt_or_mismatched_checkpoints_are_one_line_errors(tmp_path: Path, tiny_model_dir) -> None:  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    config = attach_adapter(model, AdapterSettings(rank=2))
    trainer = SFTTrainer(model, tokenizer)
    with pytest.raises(UserError, match="has no checkpoint"):
        load_checkpoint(tmp_path, model, trainer.optimizer)
    path = save_checkpoint(tmp_path, model, trainer.optimizer, 5, config)
    (tmp_path / "checkpoints" / ".step-0000006.half").mkdir()  # what a kill during a save leaves

    other, _ = load_model(str(tiny_model_dir))
    attach_adapter(other, AdapterSettings(rank=4))
    with pytest.raises(UserError, match="does not fit the model"):
        load_checkpoint(tmp_path, other, SFTTrainer(other, tokenizer).optimizer)

    state = path / "state.json"
    for wrong in ('{"step": "5", "extra": {}}', '{"step": 5.5, "extra": {}}', '{"step": 5, "extra": [1]}', "[5]"):
        state.write_text(wrong)
        with pytest.raises(UserError, match="state.json must hold a whole-number step and an extra mapping"):
            load_checkpoint(tmp_path, model, trainer.optimizer)
    state.write_text('{"step": 5, "extra": {}}')
    mx.save_safetensors(str(path / "rng.safetensors"), {"key": mx.zeros((3,), dtype=mx.uint32)})
    with pytest.raises(UserError, match=r"its random key is uint32 \(3,\), expected uint32 \(2,\)"):
        load_checkpoint(tmp_path, model, trainer.optimizer)

    weights = path / "adapters.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(UserError, match="is corrupt") as error:
        load_checkpoint(tmp_path, model, trainer.optimizer)
    assert "\n" not in str(error.value)
    (path / "optimizer.safetensors").unlink()
    with pytest.raises(UserError, match="no optimizer.safetensors"):
        load_checkpoint(tmp_path, model, trainer.optimizer)


def test_killed_run_resumes_onto_the_same_trajectory(tmp_path: Path, tiny_model_dir, data_dir) -> None:  # noqa: F811
    common = ["--iters", "6", "--eval-every", "100", "--eval-games", "0", "--save-every", "2"]
    whole = tmp_path / "whole"
    assert sft(*tiny_args(tiny_model_dir, data_dir, whole, *common)).exit_code == 0

    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, str(REPO / "cli.py"), "sft",
                                *tiny_args(tiny_model_dir, data_dir, killed, *common)], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        latest = latest_checkpoint(killed)
        if latest is not None and latest.name >= "step-0000002":
            break
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    stopped_at = int(latest_checkpoint(killed).name.split("-")[1])
    assert 2 <= stopped_at < 6

    resumed = sft(*tiny_args(tiny_model_dir, data_dir, killed, *common, "--resume"))
    assert resumed.exit_code == 0, resumed.output + str(resumed.exception)
    a, b = metrics(whole), metrics(killed)
    assert [r["step"] for r in b] == [r["step"] for r in a] == list(range(0, 7))
    for x, y in zip(a[1:], b[1:]):
        assert (x["lr"], x["tokens"]) == (y["lr"], y["tokens"])  # same schedule position, same batches
        assert y["loss"] == pytest.approx(x["loss"], abs=1e-4)
    assert b[-1]["val_loss"] == pytest.approx(a[-1]["val_loss"], abs=1e-4)


def test_redirected_output_shows_progress_from_the_first_validation(tmp_path, tiny_model_dir, data_dir,
                                                                    monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("WORDLE_RL_PROGRESS_EVERY", "0.001")
    args = [a for a in tiny_args(tiny_model_dir, data_dir, tmp_path / "run") if a != "--quiet"]
    result = sft(*args, "--iters", "2", "--eval-every", "2", "--eval-games", "1", "--save-every", "2")
    assert result.exit_code == 0, result.output
    assert "sft (validating): 0/2 steps, - steps/s" in result.output  # the start model's eval, before step 1
    assert "2/2 steps" in result.output


def test_the_same_command_again_continues_the_run_and_a_changed_flag_is_named(tmp_path, finished_run, tiny_model_dir,
                                                                              data_dir) -> None:  # noqa: F811
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = (run / "metrics.jsonl").read_text()
    again = sft(*tiny_args(tiny_model_dir, data_dir, run, "--iters", "6"))
    assert again.exit_code == 0, again.output
    assert (run / "metrics.jsonl").read_text() == before  # finished: nothing trains again
    for flags in (["--seed", "1", "--resume"], ["--seed", "1", "--eval-games", "0"]):
        result = sft(*tiny_args(tiny_model_dir, data_dir, run, "--iters", "6", *flags))
        assert result.exit_code == 2
        assert result.stderr.strip() == (f"error: {run} holds an SFT run that continues as it started: {MAY_CHANGE} "
                                         "(got --seed); choose another --out for a new run")
    other_data = tmp_path / "other-data"
    shutil.copytree(data_dir, other_data)
    with (other_data / "train.jsonl").open("a") as train:
        train.write((data_dir / "valid.jsonl").read_text().splitlines()[0] + "\n")
    result = sft(*tiny_args(tiny_model_dir, other_data, run, "--iters", "6"))
    assert result.exit_code == 2 and "(got --data (its train.jsonl))" in result.stderr, result.output
    # --resume takes what it is not given from the run's record, --data and --model included.
    assert sft("--out", str(run), "--resume", "--quiet").exit_code == 0


def test_a_run_that_never_reached_a_checkpoint_starts_again(tmp_path, finished_run, tiny_model_dir) -> None:  # noqa: F811
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(finished_run / "run.json", run / "run.json")  # killed before its first checkpoint
    result = sft("--out", str(run), "--resume", "--quiet", "--eval-games", "0")
    assert result.exit_code == 0, result.output
    assert f"note: {run} has no checkpoint yet; its run starts again from step 0" in result.stderr
    assert [r["step"] for r in metrics(run)] == list(range(7))
    assert json.loads((run / "run.json").read_text())["eval_games"] == 0  # a flag that may change did


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("content, message", [
    ("not json\n", "train.jsonl line 1: not valid JSON"),
    ('{"text": "hello"}\n', 'line 1: expected an object with a "messages" list'),
    ('{"messages": [{"role": "user", "content": "hi"}]}\n', "line 1: the last message must be the assistant's"),
    ('{"messages": [{"role": "assistant", "content": "<guess>crane</guess>"}]}\n', "line 1: no user message"),
    ('{"messages": [{"role": "robot", "content": "hi"}]}\n', "line 1: message 0 needs a role"),
    ("\n", "holds no examples"),
])
def test_bad_jsonl(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text(content)
    result = sft("--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"))
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "run").exists()


# Every knob's own range is refused at parse time (tests/test_knobs.py tries each one); these are a
# learning rate below it and the warm-up, which is checked against --iters.
@pytest.mark.parametrize("flags, message", [
    (["--lr", "-1e-4"], "'--lr': -0.0001 is not in the range 0<x<=1"),
    (["--warmup", "50", "--iters", "50"], "--warmup must be between 0 and --iters - 1"),
])
def test_bad_hyperparameters(tmp_path: Path, data_dir: Path, flags: list[str], message: str) -> None:
    result = sft("--data", str(data_dir), "--out", str(tmp_path / "run"), *flags)
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_missing_data_model_and_checkpoint(tmp_path: Path, tiny_model_dir, data_dir) -> None:  # noqa: F811
    (tmp_path / "empty").mkdir()
    cases = [
        (["--data", str(tmp_path / "nope")], "does not exist; make it with gen-sft"),
        (["--data", str(tmp_path / "empty")], "has no train.jsonl"),  # beside --out: never inside what it reads
        (["--data", str(data_dir), "--model", str(tmp_path / "no-model")], "model folder not found"),
        (["--data", str(data_dir), "--model", str(tiny_model_dir), "--resume"], "has no checkpoint to resume from"),
        (["--model", str(tiny_model_dir)], "--data is needed to start a run"),
        (["--data", str(data_dir), "--model", str(tiny_model_dir), "--max-seq-len", "64"],
         "--max-seq-len 64 is too small: the longest train example has"),
        (["--data", str(data_dir), "--model", str(tiny_model_dir), "--batch-size", "500"],
         "fewer than --batch-size 500"),
    ]
    for flags, message in cases:
        result = sft("--out", str(tmp_path / "run"), *flags)
        assert result.exit_code == 2, (flags, result.output)
        assert message in result.stderr and result.stderr.count("\n") == 1, (flags, result.stderr)
        assert not (tmp_path / "run").exists()


def test_corrupt_checkpoint_on_resume(tmp_path, finished_run, tiny_model_dir, data_dir) -> None:  # noqa: F811
    run = tmp_path / "copy"
    shutil.copytree(finished_run, run)
    state = latest_checkpoint(run) / "state.json"
    state.write_text(state.read_text().replace('"step": 6', '"step": 9'))  # never written by a run: --iters is 6
    result = sft(*tiny_args(tiny_model_dir, data_dir, run, "--iters", "6", "--resume"))
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "is at step 9, past --iters 6" in result.stderr
    (latest_checkpoint(run) / "optimizer.safetensors").write_bytes(b"\x00" * 10)
    result = sft(*tiny_args(tiny_model_dir, data_dir, run, "--iters", "6", "--resume"))
    assert result.exit_code == 2
    assert "is corrupt" in result.stderr and result.stderr.count("\n") == 1


def test_non_finite_weights_or_optimizer_state_are_refused(tmp_path, finished_run, tiny_model_dir,
                                                            data_dir) -> None:  # noqa: F811
    """A NaN in a checkpoint would resume to loss NaN and an all-NaN adapter with exit 0."""
    for name in ("adapters.safetensors", "optimizer.safetensors"):
        run = tmp_path / name
        shutil.copytree(finished_run, run)
        path = latest_checkpoint(run) / name
        arrays = dict(mx.load(str(path)))
        first = next(k for k, v in arrays.items() if mx.issubdtype(v.dtype, mx.floating) and v.size > 1)
        arrays[first] = mx.where(mx.arange(arrays[first].size).reshape(arrays[first].shape) == 1, mx.nan,
                                 arrays[first])
        mx.save_safetensors(str(path), arrays)
        result = sft(*tiny_args(tiny_model_dir, data_dir, run, "--iters", "6", "--resume"))
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
        assert f"{path} holds NaN or infinite values" in result.stderr
    # An adapter folder that holds them is refused where it is loaded, by its file.
    adapter = latest_checkpoint(tmp_path / "adapters.safetensors")
    result = sft(*tiny_args(tiny_model_dir, data_dir, tmp_path / "from-nan", "--adapter", str(adapter)))
    assert result.exit_code == 2 and f"{adapter / 'adapters.safetensors'} holds NaN" in result.stderr


def test_a_diverging_fit_stops_with_one_line_and_saves_nothing(tmp_path, finished_run, tiny_model_dir,
                                                               data_dir) -> None:  # noqa: F811
    """A start adapter whose values are finite but overflow the forward pass made the loss NaN at
    every step, and sft saved an all-NaN adapter with exit 0."""
    adapter = tmp_path / "overflowing"
    shutil.copytree(finished_run / "adapter", adapter)
    arrays = dict(mx.load(str(adapter / "adapters.safetensors")))
    mx.save_safetensors(str(adapter / "adapters.safetensors"),
                        {k: v * 1e30 if "lora_b" in k else v for k, v in arrays.items()})
    out = tmp_path / "run"
    result = sft(*tiny_args(tiny_model_dir, data_dir, out, "--iters", "3", "--adapter", str(adapter)))
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "sft step 1: the loss went nan (the fit diverged); nothing of that step was saved" in result.stderr
    assert not (out / "adapter").exists() and latest_checkpoint(out) is None
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [0]


def test_resume_clears_what_killed_writes_left(tmp_path, finished_run, tiny_model_dir, data_dir) -> None:  # noqa: F811
    run = tmp_path / "copy"
    shutil.copytree(finished_run, run)
    (run / ".latest.abc12345.tmp").write_text("step-0000006\n")
    for name in (".adapter.k3j4h5g6", ".adapter.old"):
        shutil.copytree(run / "adapter", run / name)
    result = sft(*tiny_args(tiny_model_dir, data_dir, run, "--iters", "6", "--resume"))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == [".lock"]


def test_data_folder_loads_all_splits(data_dir: Path) -> None:
    data = load_data_dir(data_dir)
    assert len(data.valid) == 8 and len(data.train) > 16 and data.test == []
    assert all(c[-1]["role"] == "assistant" and c[-1]["content"].startswith("<think>") for c in data.train)


def test_data_made_from_held_out_secrets_is_refused(tmp_path: Path, data_dir: Path) -> None:
    folder = tmp_path / "data"
    shutil.copytree(data_dir, folder)
    secret = held_out(default_word_lists().answers)[0]
    (folder / "manifest.json").write_text(json.dumps({"secrets": {"train": ["crane", secret]}}))
    result = sft("--data", str(folder), "--out", str(tmp_path / "run"))
    assert result.exit_code == 2
    assert f"made from eval's held-out secrets ({secret})" in result.stderr
    (folder / "manifest.json").write_text(json.dumps({"secrets": {"train": ["crane"]}}))
    assert load_data_dir(folder).train == load_data_dir(data_dir).train
