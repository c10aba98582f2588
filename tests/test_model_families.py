"""Bring your own model: the families people train on Wordle, each tiny and random, through every stage.

Quick (default suite, a few seconds each): every architecture with the tokenizer families it
ships with and one other, loaded, its gen-sft examples tokenized as the game plays them, one
LoRA SFT step, one eval game, and a batched decode with our CPU kernels held to mlx-lm's own.
Slow: each family through both pipelines (gen-sft, SFT, LoRA RL with GRPO and expert
iteration, a naming head fitted and played, head RL, eval), SFT's resume, the endgame eval
and QLoRA on a 4-bit model. Bad folders and tokenizers: one `error:` line, exit code 2.
"""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner
from mlx_lm.models.cache import make_prompt_cache
from tiny_model import cached_tiny_model

from cli import cli
from common.errors import UserError
from eval.harness import evaluate
from eval.splits import trainable
from llm.format import NAMING_WORD, messages, parse_answer, prompt_tokens
from llm.generation import SamplingSettings
from llm.loading import load_model
from llm.naming_head import naming_tokens
from llm.player import ModelPlayer
from llm.tolerance import logit_tolerance
from llm.vector_exp import vector_exp
from llm.word_steering import WordTokens, word_basis
from rl.naming_head import naming_context
from sft.cot import expert_answer
from sft.data import tokenize
from sft.lora import AdapterSettings, attach_adapter
from sft.trainer import OptimizerSettings, SFTTrainer, output_split
from solver.setup import load_setup

# Each architecture with the tokenizer it ships with (Qwen and Llama 3: byte-level BPE with `Ġ`;
# Gemma, Mistral, Llama 2 and Phi-3: SentencePiece with `▁`, Llama 2's and Phi-3's in the legacy
# form that puts `▁` before every text) and one other family.
FAMILIES = [("llama", "bpe"), ("llama", "sentencepiece-legacy"), ("qwen2", "bpe"), ("qwen3", "bpe"),
            ("qwen3", "sentencepiece"), ("gemma3_text", "sentencepiece"), ("gemma3_text", "bpe"),
            ("phi3", "sentencepiece-legacy"), ("phi3", "bpe"), ("mistral", "sentencepiece")]


@pytest.fixture(scope="module")
def setup():
    return load_setup("answers")


@pytest.fixture(scope="module")
def models_root(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "models"


def solver_game(setup) -> tuple[list, list]:
    """Every position of the solver's first game on a training secret that reaches one candidate
    (its thought then names it after ` Only`), as (states, chats)."""
    solver = setup.solver()
    for secret in trainable(setup.lists.answers):
        state, column = setup.start, setup.lists.answers.index(secret)
        states, chats = [], []
        while not state.over:
            answer = expert_answer(solver, state)
            states.append(state)
            chats.append([*messages(state), {"role": "assistant", "content": answer}])
            guess = parse_answer(answer).guess
            state = state.play(guess, int(setup.matrix[setup.lists.index(guess), column]))
        if any(f" {NAMING_WORD} " in chat[-1]["content"] for chat in chats):
            return states, chats
    raise AssertionError("no solver game reached one candidate")


def decode_logits(model, prompts: list[list[int]], steps: int, vector: bool) -> np.ndarray:
    """(steps, rows, vocabulary) logits of a batched decode as mlx-lm's batch generator runs one:
    each prompt prefilled in its own cache, the caches merged (left-padded rows, Gemma's sliding
    windows as mlx-lm's rotating batch cache), then one token a row a step; with our CPU kernels
    (llm/vector_exp.py, llm/decode_attention.py) or mlx's and mlx-lm's own."""
    with vector_exp(model, vector):
        caches = []
        for prompt in prompts:
            cache = make_prompt_cache(model)
            model(mx.array(prompt[:-1])[None], cache=cache)
            caches.append(cache)
        batch = [layers[0].merge(list(layers)) for layers in zip(*caches)]
        inputs = mx.array([[prompt[-1]] for prompt in prompts])
        out = []
        for step in range(steps):
            logits = model(inputs, cache=batch)[:, -1].astype(mx.float32)
            out.append(np.array(logits))
            inputs = mx.array([[(7 * step + 3 * row) % logits.shape[-1]] for row in range(len(prompts))])
    return np.stack(out)


@pytest.mark.parametrize("architecture, tokenizer_kind", FAMILIES)
def test_a_family_loads_trains_a_step_plays_and_decodes_as_mlx_does(architecture, tokenizer_kind, setup,
                                                                   models_root):
    model, tokenizer = load_model(str(cached_tiny_model(models_root, architecture=architecture,
                                                        tokenizer=tokenizer_kind)))
    assert output_split(model) is not None  # SFT runs the output layer on answer positions only

    # gen-sft's examples: the prompt SFT masks is the one eval plays, and the answer's ` Only` and
    # named word are the tokens the naming head waits for and names.
    states, chats = solver_game(setup)
    examples = tokenize(tokenizer, chats)
    vocabulary = WordTokens.of(tokenizer, list(setup.lists.allowed))
    naming = list(naming_tokens(tokenizer))
    named = 0
    for state, chat, (tokens, offset) in zip(states, chats, examples):
        assert tokens[:offset] == prompt_tokens(tokenizer, state)
        assert tokenizer.decode(tokens[offset:]).startswith(chat[-1]["content"])
        answer = tokens[offset:]
        for at in range(len(answer) - len(naming)):
            if answer[at:at + len(naming)] == naming:
                word = parse_answer(chat[-1]["content"]).guess
                sequence = vocabulary.sequences[vocabulary.words.index(word)]
                assert tuple(answer[at + len(naming):at + len(naming) + len(sequence)]) == sequence
                named += 1
    assert named == 1

    # One LoRA SFT step, then one eval game.
    mx.random.seed(0)
    attach_adapter(model, AdapterSettings(rank=2))
    trainer = SFTTrainer(model, tokenizer, OptimizerSettings(learning_rate=1e-3))
    step = trainer.train_on_messages(chats[:2], steps=1, batch_size=2)[0]
    assert np.isfinite(step.loss) and step.grad_norm > 0
    player = ModelPlayer(model, tokenizer, architecture, SamplingSettings(max_tokens=8))
    summary, games = evaluate(player, setup, ["crane"], show_progress=False)
    assert summary["games"] == 1 and summary["answers"] >= 3 and len(games[0].moves) >= 3

    # Our CPU kernels step aside where they do not fit (Gemma's sliding windows) and agree with
    # mlx's elsewhere: prompts longer than Gemma's window of 24, left-padded, decoded past it.
    prompts = [prompt_tokens(tokenizer, state)[:length] for state, length in zip(states, (40, 29))]
    ours, theirs = decode_logits(model, prompts, 12, True), decode_logits(model, prompts, 12, False)
    rtol, atol = logit_tolerance(mx.float32)
    assert np.allclose(ours, theirs, rtol=rtol, atol=atol), np.abs(ours - theirs).max()


def run_cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_the_naming_head_refuses_a_tokenizer_with_no_word_tokens_in_one_line(setup, models_root, tmp_path):
    """Every word after a space is `▁` and then its letters: no token holds a word's start, so a
    head would score every word by one token's embedding. Refused where a head is built; the
    model itself plays."""
    tiny = cached_tiny_model(models_root, architecture="qwen3", tokenizer="chars")
    model, tokenizer = load_model(str(tiny))
    with pytest.raises(UserError, match="cannot serve this model: its tokenizer opens no word with a token") as error:
        word_basis(model, WordTokens.of(tokenizer, list(setup.lists.allowed)))
    assert "\n" not in str(error.value)
    adapter = write_adapter(tiny, tmp_path / "adapter")
    result = run_cli("naming-head", "--model", tiny, "--adapter", adapter, "--positions", 2,
                     "--validation-positions", 2, "--epochs", 1)
    assert result.exit_code == 2 and result.output.count("error:") == 1, result.output
    assert "no word with a token that holds a letter" in result.output
    assert not (adapter / "naming_states.npz").exists()  # refused before the model's passes
    assert run_cli("eval", "--model", tiny, "--games", 1, "--max-tokens", 8, "--quiet").exit_code == 0


def write_adapter(model_dir, out):
    from llm.adapter_files import save_adapter
    from sft.lora import trainable_weights

    model, _ = load_model(str(model_dir))
    mx.random.seed(1)
    config = attach_adapter(model, AdapterSettings(rank=2))
    return save_adapter(out, trainable_weights(model), config)


def test_naming_contexts_end_with_the_tokens_the_model_writes(setup, models_root):
    """The states a head is fitted on are taken where eval's head fires: after the thought's tokens
    as the model writes them (a legacy SentencePiece tokenizer writes `▁<think>` for the thought
    alone, and `▁▁Only` for ` Only` alone)."""
    from rl.naming_head import one_candidate_positions

    tiny = cached_tiny_model(models_root, architecture="phi3", tokenizer="sentencepiece-legacy")
    _, tokenizer = load_model(str(tiny))
    position = one_candidate_positions(setup, trainable(setup.lists.answers)[:40], 1, 0)[0]
    context = naming_context(tokenizer, position)
    prompt = prompt_tokens(tokenizer, position.state, position.rejected)
    chat = tokenize(tokenizer, [[*messages(position.state, position.rejected),
                                 {"role": "assistant", "content": expert_answer(setup.solver(), position.state)}]])
    tokens, offset = chat[0]
    assert offset == len(prompt) and context == tokens[:len(context)]
    assert tuple(context[-len(naming_tokens(tokenizer)):]) == naming_tokens(tokenizer)


@pytest.mark.parametrize("make, message", [
    (lambda folder: (folder / "config.json").write_text(json.dumps({"model_type": "nosuch", "hidden_size": 8})),
     "names model_type 'nosuch', an architecture this mlx-lm has no code for"),
    (lambda folder: [(folder / name).unlink() for name in ("tokenizer.json", "tokenizer_config.json")],
     "holds no tokenizer"),
    (lambda folder: (folder / "tokenizer_config.json").write_text(json.dumps(
        {k: v for k, v in json.loads((folder / "tokenizer_config.json").read_text()).items() if k != "chat_template"})),
     "has no chat template"),
    (lambda folder: (folder / "tokenizer_config.json").write_text(json.dumps(
        {**json.loads((folder / "tokenizer_config.json").read_text()),
         "chat_template": "{{ raise_exception('System role not supported') }}"})),
     "its chat template refuses the game's system, user and assistant messages (System role not supported)"),
    (lambda folder: [(folder / name).unlink() for name in ("model.safetensors",)], "No safetensors found"),
])
def test_a_folder_that_cannot_play_is_one_error_line(make, message, models_root, tmp_path):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(cached_tiny_model(models_root, architecture="qwen3"), folder)
    make(folder)
    result = run_cli("eval", "--model", folder, "--games", 1, "--quiet")
    assert result.exit_code == 2 and result.output.count("error:") == 1, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_tokenizer_that_does_not_match_its_model_type_is_refused(models_root):
    """A Qwen2 folder with a SentencePiece tokenizer.json: transformers builds its Qwen2 tokenizer
    from the model type, which drops every space (the model would learn `Onlylowlyremains.`)."""
    result = run_cli("eval", "--model", cached_tiny_model(models_root, architecture="qwen2", tokenizer="sentencepiece"),
                     "--games", 1, "--quiet")
    assert result.exit_code == 2 and result.output.count("error:") == 1, result.output
    assert "does not give the game's text back: 'You play Wordle" in result.output


# ---- every stage, slow ----------------------------------------------------------------------

SLOW_FAMILIES = [("llama", "sentencepiece-legacy"), ("qwen2", "bpe"), ("qwen3", "bpe"),
                 ("gemma3_text", "sentencepiece"), ("phi3", "sentencepiece-legacy")]


@pytest.mark.slow
@pytest.mark.parametrize("architecture, tokenizer_kind", SLOW_FAMILIES)
def test_every_stage_runs_on_a_family(architecture, tokenizer_kind, models_root, tmp_path, monkeypatch):
    """From scratch: gen-sft, SFT killed after its first checkpoint and resumed, LoRA RL (expert
    iteration and GRPO), a naming head fitted on RL's adapter and played by eval; then from that
    SFT adapter: a head fitted, head RL, the start with its head; the endgame eval with a head."""
    import sft.run
    from rl.pipeline import STAGES_FILE, PipelineSettings, run_pipeline

    tiny = str(cached_tiny_model(models_root, architecture=architecture, tokenizer=tokenizer_kind))
    scratch = PipelineSettings(model=tiny, sft_games=12, sft_iters=3, rl_steps=2, rl_games=2, group_size=2,
                               eval_games=2, max_tokens=12, ei_replay=2, ei_drill=1, ei_drill_depth=1, naming_head=4,
                               rl_schedule="ei:1,grpo:1")
    out = tmp_path / "scratch"
    real_save, saves = sft.run.save_checkpoint, []

    def killed_at_the_second(*args, **kwargs):
        saves.append(args)
        if len(saves) == 2:
            raise KeyboardInterrupt
        return real_save(*args, **kwargs)

    monkeypatch.setattr(sft.run, "save_checkpoint", killed_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(out, scratch, show_progress=False)
    monkeypatch.undo()
    summary = run_pipeline(out, scratch, show_progress=False)
    stages = json.loads((out / STAGES_FILE).read_text())["stages"]
    assert list(stages) == ["gen-sft", "sft", "rl", "naming-head", "eval-base", "eval-sft", "eval-rl"]
    steps = [json.loads(line)["step"] for line in (out / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert stages["sft"]["steps"] == 3 and steps == sorted(set(steps)) and steps[-1] == 3  # resumed, no step twice
    phases = {json.loads(line)["phase"] for line in (out / "rl" / "metrics.jsonl").read_text().splitlines()}
    assert {"ei", "grpo"} <= phases and stages["rl"]["steps"] == 2
    played = json.loads((out / "eval-rl.json").read_text())
    assert played["policy"].endswith("+naming head") and summary["eval"]["rl"]["games"] == 2

    start = out / "sft" / "adapter"
    from_start = PipelineSettings(model=tiny, sft_start=str(start), start_head=4, head_rl_steps=2, head_games=2,
                                  head_eval_every=1, eval_games=2, max_tokens=12, eval_start_head=True)
    summary = run_pipeline(tmp_path / "from-start", from_start, show_progress=False)
    assert summary["models"] == ["base", "sft", "sft-head", "rl"]
    stages = json.loads((tmp_path / "from-start" / STAGES_FILE).read_text())["stages"]
    assert stages["rl"]["steps"] == 2 and all(summary["eval"][m]["games"] == 2 for m in summary["models"])

    endgame = tmp_path / "endgame.json"
    result = run_cli("eval", "--model", tiny, "--adapter", tmp_path / "from-start" / "rl" / "best", "--endgame",
                     "--split", "validation", "--positions", 4, "--max-tokens", 12, "--quiet", "--json", endgame)
    assert result.exit_code == 0, result.output
    figures = json.loads(endgame.read_text())
    assert figures["positions"] == 4 and figures["policy"].endswith("+naming head")


@pytest.mark.slow  # 4-bit matmuls run on scalar code on a CPU: 20 s of CPU
def test_a_4bit_model_trains_a_lora_that_plays_as_trained(setup, models_root, tmp_path):
    """QLoRA: a 4-bit model, quantized as `mlx_lm convert -q` writes one, trains a LoRA over its
    quantized layers as mlx-lm arranges them (our trainer: masked loss on the answer positions
    through the split output layer), and that adapter played by `load_model`, which dequantizes on
    a CPU, gives the quantized model's logits; `sft` trains on it through the CLI."""
    from mlx_lm.utils import load

    from llm.adapter_files import save_adapter
    from sft.lora import trainable_weights

    folder = cached_tiny_model(models_root, architecture="qwen3", bits=4)
    quantized, tokenizer = load(str(folder))
    assert type(quantized.layers[0].self_attn.q_proj).__name__ == "QuantizedLinear"
    mx.random.seed(0)
    config = attach_adapter(quantized, AdapterSettings(rank=4))
    assert type(quantized.layers[0].self_attn.q_proj.linear).__name__ == "QuantizedLinear"
    assert output_split(quantized) is not None
    _, chats = solver_game(setup)
    trainer = SFTTrainer(quantized, tokenizer, OptimizerSettings(learning_rate=1e-2))
    losses = [s.loss for s in trainer.train_on_messages(chats[:2], steps=4, batch_size=2)]
    assert losses[-1] < losses[0]
    adapter = save_adapter(tmp_path / "adapter", trainable_weights(quantized), config)
    assert set(trainable_weights(quantized)) == {k for k in mx.load(str(adapter / "adapters.safetensors"))}
    played, _ = load_model(str(folder), adapter)
    probe = mx.array([prompt_tokens(tokenizer, setup.start)[:24]])
    quantized.eval()
    rtol, atol = logit_tolerance(mx.float32)
    assert np.allclose(np.array(played(probe)), np.array(quantized(probe)), rtol=rtol, atol=10 * atol)

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats))
    result = run_cli("sft", "--model", folder, "--data", data, "--out", tmp_path / "run", "--iters", 1,
                     "--batch-size", 2, "--eval-games", 0, "--quiet")
    assert result.exit_code == 0, result.output
