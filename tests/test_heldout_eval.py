"""Held-out evaluation inside training: the validation/test split, the shared eval that
replays the same games, the best checkpoint an RL run keeps (also across an interrupted
export and a resume), and the curves `report` draws from the held-out records.
"""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)

from cli import cli
from eval.harness import evaluate
from eval.run import choose_secrets
from eval.splits import held_out, held_out_test, held_out_validation, is_held_out, is_validation, untaught
from eval.validation import FIGURES, HeldOutEval, rank
from llm.generation import SamplingSettings
from llm.loading import load_model
from rl.config import build_config
from rl.heldout import BestSoFar
from rl.loop import RunRequest, resume_request, run_rl
from rl.report import curves, heldout_note, write_png
from sft.checkpoint import latest_checkpoint
from solver.setup import load_setup
from solver.words import default_word_lists

# Expert iteration only (the fastest step on the tiny model), a held-out eval after every step.
EVAL_RUN = {
    "steps": 4, "schedule": "ei:1", "seed": 3, "eval_every": 1, "eval_games": 4,
    "rollout": {"max_tokens": 10, "batch_size": 8, "max_history": 2},
    "ei": {"states_per_step": 2, "samples": 2, "sft_steps": 1, "batch_size": 2, "learning_rate": 1e-3},
    "lora": {"rank": 2},
}


def figures(wins: int, consistency: float | None) -> dict:
    return {"games": 4, "wins": wins, "win_rate": wins / 4, "mean_guesses": 4.0 if wins else None,
            "format_valid_rate": 0.9, "invalid_word_rate": 0.05, "repeat_rate": 0.0, "consistency_rate": consistency,
            "mean_regret_bits": 1.0, "lost_to_invalid": 0, "temperature": 0.7, "seconds": 0.01}


# Step -> figures: step 2 and 3 tie on wins, step 3 is more consistent; step 4 wins fewer.
SCRIPT = [figures(1, 0.5), figures(0, 0.9), figures(3, 0.2), figures(3, 0.4), figures(2, 0.9)]


class ScriptedEval:
    """Stands in for HeldOutEval in a run: hands out the next figures at every eval."""

    def __init__(self, script: list[dict]) -> None:
        self.script, self.secrets = iter(script), ["about"] * 4

    def __call__(self, model, tokenizer) -> dict:
        return next(self.script)


def scripted(monkeypatch, script: list[dict]) -> None:
    monkeypatch.setattr("rl.lora_loop.HeldOutEval", lambda *args: ScriptedEval(script))


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not any(t in k for t in ("seconds", "per_s", "memory"))} for r in records]


def adapter_weights(folder) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in mx.load(str(folder / "adapters.safetensors")).items()}


# ---- splits ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["answers", "allowed"])
def test_validation_and_test_divide_the_held_out_words(kind):
    words = default_word_lists().secrets(kind)
    validation, test = held_out_validation(words), held_out_test(words)
    assert not set(validation) & set(test)
    assert sorted(validation + test) == sorted(held_out(words))
    assert 0.28 < len(validation) / len(held_out(words)) < 0.40
    assert held_out_validation(list(reversed(words))) == list(reversed(validation))  # by word, not position


def test_the_validation_words_are_fixed_and_eval_can_choose_either_part():
    answers = default_word_lists().answers
    assert held_out_validation(answers)[:4] == ["about", "adult", "along", "altar"]
    assert held_out_test(answers)[:4] == ["acrid", "after", "agape", "agile"]
    assert all(map(is_validation, choose_secrets(answers, "validation", 10, 0)))
    assert not any(map(is_validation, choose_secrets(answers, "test", 10, 0)))
    assert choose_secrets(answers, "heldout", None, 0) == held_out(answers)  # unchanged: old figures reproduce


def test_untaught_words_are_the_trainable_ones_sft_data_never_trains_on(tmp_path):
    """gen-sft's training file never has an untaught secret; its valid and test files have only those."""
    answers = default_word_lists().answers
    words = untaught(answers)
    assert len(words) == 200 and not any(map(is_held_out, words))
    assert choose_secrets(answers, "untaught", None, 0) == words
    out = tmp_path / "data"
    result = CliRunner().invoke(cli, ["gen-sft", "--out", str(out), "--games", "300", "--seed", "0", "--quiet"])
    assert result.exit_code == 0, result.output
    secrets = json.loads((out / "manifest.json").read_text())["secrets"]
    assert not set(secrets["train"]) & set(words)
    assert set(secrets["valid"]) | set(secrets["test"]) <= set(words)


# ---- the shared eval ----------------------------------------------------------------------------

def test_heldout_eval_replays_the_same_games_and_leaves_training_state_alone(tiny_model_dir, monkeypatch):  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    games = HeldOutEval(load_setup("answers"), 4, seed=1, sampling=SamplingSettings(max_tokens=12), batch_size=8)
    assert len(games.secrets) == 4 and all(map(is_validation, games.secrets))
    answers = []

    def spy(*args, **kwargs):
        summary, played = evaluate(*args, **kwargs)
        answers.append([m.text for g in played for m in g.moves])
        return summary, played

    monkeypatch.setattr("eval.validation.evaluate", spy)
    mx.random.seed(123)
    key = np.array(mx.random.state[0])
    model.train()
    first, second = games(model, tokenizer), games(model, tokenizer)
    assert np.array_equal(np.array(mx.random.state[0]), key) and model.training
    assert answers[0] == answers[1] and len(answers[0]) == 12  # 4 games lost to 3 unplayable answers each
    assert {**first, "seconds": 0} == {**second, "seconds": 0}
    assert set(first) == {*FIGURES, "temperature", "seconds"} and first["temperature"] == 0.7
    model.eval()
    games(model, tokenizer)
    assert not model.training


def test_rank_prefers_wins_then_consistency():
    assert rank(figures(2, 0.1)) > rank(figures(1, 0.9)) > rank(figures(1, 0.5)) > rank(figures(1, None))
    best = BestSoFar(None)
    assert best.offer({"step": 0, **figures(1, 0.5)}) and not best.offer({"step": 1, **figures(1, 0.5)})
    assert best.offer({"step": 2, **figures(1, 0.6)}) and best.best["step"] == 2


# ---- RL: the best checkpoint ------------------------------------------------------------------

def test_rl_keeps_the_best_eval_as_run_best_and_resumes_an_interrupted_export(tmp_path, tiny_model_dir,
                                                                              monkeypatch):  # noqa: F811
    config = build_config(EVAL_RUN)
    straight = tmp_path / "straight"
    scripted(monkeypatch, SCRIPT)
    summary = run_rl(RunRequest(str(tiny_model_dir), None, straight, config, show_progress=False))
    records = metrics(straight)
    assert [(r["step"], r["phase"]) for r in records] == [(0, "heldout"), *((s, p) for s in range(1, 5)
                                                                            for p in ("ei", "heldout"))]
    assert [r["heldout_wins"] for r in records if r["phase"] == "heldout"] == [1, 0, 3, 3, 2]
    best = json.loads((straight / "best.json").read_text())
    assert best["step"] == 3 and best["wins"] == 3 and best["consistency_rate"] == 0.4
    assert summary["best_step"] == 3 and summary["best_adapter"] == str(straight / "best")
    assert summary["heldout_start"]["step"] == 0 and summary["heldout_start"]["wins"] == 1
    assert summary["heldout_last"]["step"] == 4 and summary["heldout_best"]["step"] == 3
    assert summary["steps"] == 4 and summary["ei_steps"] == 4
    # A new best is checkpointed (step 3) though checkpoint_every is 10; step 4 trained on from there.
    assert sorted(p.name for p in (straight / "checkpoints").iterdir()) == ["step-0000003", "step-0000004"]
    best_weights = adapter_weights(straight / "best")
    assert any(not np.array_equal(best_weights[k], v) for k, v in adapter_weights(straight / "adapter").items())
    load_model(str(tiny_model_dir), straight / "best")

    # Killed after step 3's checkpoint, before RUN/best was replaced: the resume finishes the export.
    class Killed(Exception):
        pass

    real_export = BestSoFar.export

    def cut_short(self, policy):
        if self.best["step"] == 3:
            raise Killed
        real_export(self, policy)

    interrupted = tmp_path / "interrupted"
    monkeypatch.setattr(BestSoFar, "export", cut_short)
    scripted(monkeypatch, SCRIPT)
    with pytest.raises(Killed):
        run_rl(RunRequest(str(tiny_model_dir), None, interrupted, config, show_progress=False))
    assert json.loads((interrupted / "best.json").read_text())["step"] == 2
    assert latest_checkpoint(interrupted).name == "step-0000003"
    monkeypatch.setattr(BestSoFar, "export", real_export)
    scripted(monkeypatch, SCRIPT[4:])  # only step 4 is left to evaluate
    resumed = run_rl(resume_request(interrupted, None, show_progress=False))
    assert json.loads((interrupted / "best.json").read_text())["step"] == 3 and resumed["best_step"] == 3
    assert all(np.array_equal(best_weights[k], v) for k, v in adapter_weights(interrupted / "best").items())
    assert without_timing(metrics(interrupted)) == without_timing(records)


def test_rl_without_evals_keeps_no_best(tmp_path, tiny_model_dir):  # noqa: F811
    out = tmp_path / "run"
    summary = run_rl(RunRequest(str(tiny_model_dir), None, out, build_config({**EVAL_RUN, "steps": 1, "eval_every": 0}),
                                show_progress=False))
    assert [r["phase"] for r in metrics(out)] == ["ei"]
    assert summary["best_step"] is None and summary["heldout_last"] is None and not (out / "best").exists()
    result = CliRunner().invoke(cli, ["rl", "--out", tmp_path / "other", "--eval-every", "-1"])
    assert result.exit_code == 2 and "--eval-every must be >= 0" in result.output


# ---- report -------------------------------------------------------------------------------------

def heldout(step: int, wins: int, consistency: float | None) -> dict:
    return {"step": step, "phase": "heldout",
            **{f"heldout_{k}": v for k, v in figures(wins, consistency).items() if k != "seconds"}, "seconds": 1.0}


def test_report_draws_held_out_curves_beside_the_training_ones(tmp_path):
    records = [heldout(0, 0, None), {"step": 1, "phase": "grpo", "games": 4, "wins": 1, "win_rate": 0.25,
                                     "reward_mean": 0.5}, heldout(1, 2, 0.5)]
    series = curves(records)
    assert series["reward_mean"] == {"step": [1], "value": [0.5]}
    assert series["heldout_wins"] == {"step": [0, 1], "value": [0, 2]}
    assert series["heldout_consistency_rate"] == {"step": [1], "value": [0.5]}  # undefined at step 0: left out
    assert heldout_note(records) == "4 held-out games at temperature 0.7"
    assert "heldout_wins" not in curves(records[1:2])  # a run without evals draws no empty held-out rows
    sft = [{"step": 0, "val_loss": 3.0, "eval_games": 2, "eval_wins": 0, "eval_temperature": 0.7},
           {"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5, "val_loss": 1.0, "eval_games": 2, "eval_wins": 1}]
    series = curves(sft)
    assert series["loss"]["value"] == [2.0, 1.5] and series["eval_wins"] == {"step": [0, 2], "value": [0, 1]}
    assert heldout_note(sft) == "2 held-out games at temperature 0.7; 2 held-out games at temperature ?"
    pytest.importorskip("matplotlib")
    write_png(curves(records), tmp_path / "curves.png", "RL run x (4 held-out games at temperature 0.7)")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
