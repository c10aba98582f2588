"""`export`: an adapter fused into a model folder that mlx-lm and `eval --model` play as the adapter plays."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir, write_lora_adapter  # noqa: F401
from mlx_lm.tuner.lora import LoRALinear

from cli import cli
from eval.run import ModelSpec
from llm.adapter_files import STACKED_ON, write_adapter
from llm.format import SYSTEM_PROMPT, prompt_tokens
from llm.generation import STOP_TEXT, SamplingSettings, sample
from llm.loading import load_model
from llm.naming_head import HEAD_FILE, naming_tokens
from sft.export import EXAMPLE_SECRET, PROMPT_DOC, RECORD, example_game, export_model
from sft.lora import AdapterSettings, trainable_weights

TOLERANCE = 1e-4  # float32 logits of the same weights through two code paths
WORDS = ("crane", "slate", "jumpy", "vowel")


def export(*args: str):
    return CliRunner().invoke(cli, ["export", *args])


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, tiny_model_dir) -> Path:  # noqa: F811
    """A LoRA adapter with a naming head file beside it (export never reads the head: it stays behind)."""
    folder = tmp_path_factory.mktemp("sft") / "adapter"
    write_lora_adapter(tiny_model_dir, folder)
    (folder / HEAD_FILE).write_bytes(b"a head export must leave behind")
    return folder


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_model_dir, adapter) -> tuple[Path, object]:  # noqa: F811
    out = tmp_path_factory.mktemp("export") / "model"
    result = export("--model", str(tiny_model_dir), "--adapter", str(adapter), "--out", str(out))
    assert result.exit_code == 0, result.output + str(result.exception)
    return out, result


def opening_prompt(tokenizer) -> list[int]:
    return prompt_tokens(tokenizer, example_game()[0].state)


def test_export_writes_a_checked_model_with_its_prompt_format(exported, adapter) -> None:
    out, result = exported
    record = json.loads((out / RECORD).read_text())
    assert record["check"]["prompts"] == len(example_game()) == 4
    assert record["check"]["max_logit_difference"] < TOLERANCE
    assert record["naming_head_left_behind"] == str((adapter / HEAD_FILE).resolve())
    assert not (out / HEAD_FILE).exists() and not any(out.glob("adapter*"))
    assert record["prompt"]["system"] == SYSTEM_PROMPT and record["prompt"]["answer_ends_at"] == STOP_TEXT
    assert record["prompt"]["examples"][0]["user"] == "This is the first guess. You have 6 guesses left. What is " \
                                                      "your guess?"
    assert f"Only {EXAMPLE_SECRET} remains." in record["prompt"]["examples"][-1]["answer"]
    doc = (out / PROMPT_DOC).read_text()
    assert SYSTEM_PROMPT in doc and "does not travel" in doc and str(adapter / HEAD_FILE) in doc
    assert result.stderr.count("note:") == 1 and "does not travel" in result.stderr
    assert f"play the opening: python -m mlx_lm generate --model {out}" in result.stdout


def test_mlx_lm_plays_the_export_as_the_toolkit_plays_the_adapter(exported, tiny_model_dir,  # noqa: F811
                                                                 adapter) -> None:
    """(a) mlx_lm.load and greedy mlx_lm generation from the record's prompt give the toolkit's first answer
    with the adapter at temperature 0, and the same logits."""
    import mlx_lm

    out, _ = exported
    model, tokenizer = mlx_lm.load(str(out))
    prompt = json.loads((out / RECORD).read_text())["prompt"]
    chat = [{"role": "system", "content": prompt["system"]}, {"role": "user", "content": prompt["examples"][0]["user"]}]
    # as `python -m mlx_lm generate --system-prompt S --prompt P` builds its prompt
    tokens = tokenizer.encode(tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True),
                              add_special_tokens=False)
    adapted, toolkit_tokenizer = load_model(str(tiny_model_dir), adapter)
    assert tokens == opening_prompt(toolkit_tokenizer)

    (answer,), = sample(adapted, toolkit_tokenizer, [tokens], 1, SamplingSettings(temperature=0.0, max_tokens=40))
    played = [r.token for r in mlx_lm.stream_generate(model, tokenizer, tokens, max_tokens=len(answer.tokens))]
    assert len(answer.tokens) >= 8 and played == list(answer.tokens)

    difference = mx.abs(model(mx.array([tokens]))[0, -1] - adapted(mx.array([tokens]))[0, -1]).max().item()
    assert difference < TOLERANCE


def test_eval_plays_the_export(exported, tmp_path) -> None:
    """(b) `eval --model OUT` plays the folder like any model folder."""
    out, _ = exported
    result = CliRunner().invoke(cli, ["eval", "--model", str(out), "--games", "1", "--temperature", "0",
                                      "--max-tokens", "8", "--quiet", "--json", str(tmp_path / "e.json")])
    assert result.exit_code == 0, result.output
    played = json.loads((tmp_path / "e.json").read_text())
    assert played["games"] == 1 and played["temperature"] == 0.0 and played["naming_head"] is None


def test_a_head_copied_into_the_export_plays_it_as_it_played_the_adapter(tmp_path,
                                                                          tiny_model_dir) -> None:  # noqa: F811
    """The head fitted beside an adapter, copied into the adapter's export, names the same words there:
    `eval --model OUT` (no --adapter) plays the same games, record for record, as `eval --adapter`, and
    says it plays with the head; --no-naming-head turns it off."""
    adapter = tmp_path / "adapter"
    write_lora_adapter(tiny_model_dir, adapter)
    fit = CliRunner().invoke(cli, ["naming-head", "--model", str(tiny_model_dir), "--adapter", str(adapter),
                                   "--positions", "6", "--validation-positions", "3", "--epochs", "4", "--rank", "2",
                                   "--quiet"])
    assert fit.exit_code == 0, fit.output
    out = tmp_path / "model"
    assert export("--model", str(tiny_model_dir), "--adapter", str(adapter), "--out", str(out)).exit_code == 0
    shutil.copy(adapter / HEAD_FILE, out / HEAD_FILE)
    played = {}
    for name, flags in {"adapter": ["--model", str(tiny_model_dir), "--adapter", str(adapter)],
                        "export": ["--model", str(out)], "off": ["--model", str(out), "--no-naming-head"]}.items():
        result = CliRunner().invoke(cli, ["eval", *flags, "--games", "3", "--max-tokens", "40", "--quiet",
                                          "--json", str(tmp_path / f"{name}.json")])
        assert result.exit_code == 0, result.output
        played[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert played["export"]["naming_head"] == str(out / HEAD_FILE) and played["off"]["naming_head"] is None
    assert played["export"]["policy"].endswith("+naming head") and "naming head" not in played["off"]["policy"]
    assert played["export"]["per_game"] == played["adapter"]["per_game"]
    scores = []  # the head's word scores at the naming token, from each player as eval loads it
    for model_dir, folder in ((tiny_model_dir, str(adapter)), (out, None)):
        publisher, tokenizer, steer = ModelSpec(str(model_dir), folder, SamplingSettings()).load(WORDS)
        publisher(mx.array([naming_tokens(tokenizer)[-1:]]))
        scores.append(publisher.next_row())
    assert steer is not None and scores[0] is not None and scores[0].shape == (len(WORDS),)
    np.testing.assert_allclose(scores[1], scores[0], atol=TOLERANCE)


def test_rl_adapters_export_the_policy_rl_trained(tmp_path, tiny_model_dir, exported) -> None:  # noqa: F811
    """An RL run's best/ (start and RL LoRA side by side) and a checkpoint (RL's LoRA stacked on the start)
    load as the model RL trained, the start fused and RL's LoRA on top; the checkpoint, the harder of the
    two, exports it (over an earlier export, which it replaces)."""
    from rl.policy import load_policy

    run = tmp_path / "rl"
    run.mkdir()
    write_lora_adapter(tiny_model_dir, run / "start_adapter")
    mx.random.seed(5)
    policy = load_policy(str(tiny_model_dir), run / "start_adapter", AdapterSettings(rank=2))
    for _, layer in policy.model.named_modules():
        if isinstance(layer, LoRALinear):
            layer.lora_b = mx.random.normal(layer.lora_b.shape) * 0.2  # as if trained: not the start's model
    policy.export(run / "best")
    checkpoint = run / "checkpoints" / "step-1"
    checkpoint.mkdir(parents=True)
    write_adapter(checkpoint, trainable_weights(policy.model), {**policy.adapter_config,
                                                                STACKED_ON: "../../start_adapter"})
    prompt = mx.array([opening_prompt(policy.tokenizer)])
    trained = policy.model(prompt)[0, -1]
    base, _ = load_model(str(tiny_model_dir))
    assert mx.abs(trained - base(prompt)[0, -1]).max().item() > 0.1  # the checks below can tell them apart
    best, _ = load_model(str(tiny_model_dir), run / "best", fuse=True)  # as export fuses it
    assert mx.abs(best(prompt)[0, -1] - trained).max().item() < TOLERANCE

    out = tmp_path / "model"
    shutil.copytree(exported[0], out)
    summary = export_model(str(tiny_model_dir), checkpoint, out)
    assert summary["replaced_an_export"] and summary["stacked_on"] == [str((run / "start_adapter").resolve())]
    model, _ = load_model(str(out))
    assert mx.abs(model(prompt)[0, -1] - trained).max().item() < TOLERANCE


@pytest.mark.parametrize("case", ["missing adapter", "not empty", "inside the adapter", "holds the adapter",
                                  "inside the start"])
def test_bad_outputs_and_inputs_are_one_error_line(case, tmp_path, tiny_model_dir, adapter) -> None:  # noqa: F811
    """(c) exit 2 with one `error:` line, before any work, and nothing written."""
    start = tmp_path / "run" / "start_adapter"
    shutil.copytree(adapter, start)
    stacked = tmp_path / "run" / "checkpoints" / "step-1"
    shutil.copytree(adapter, stacked)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (stacked / "adapter_config.json").write_text(json.dumps({**config, STACKED_ON: "../../start_adapter"}))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    given, out, message = {
        "missing adapter": (tmp_path / "nowhere", tmp_path / "m", "adapter folder not found"),
        "not empty": (adapter, tmp_path / "full", "is not empty and is not an earlier export"),
        "inside the adapter": (adapter, adapter / "model", "is inside --adapter"),
        "holds the adapter": (start, tmp_path / "run", "holds --adapter"),
        "inside the start": (stacked, start / "model", "is stacked on"),
    }[case]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = export("--model", str(tiny_model_dir), "--adapter", str(given), "--out", str(out))
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert message in lines[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
