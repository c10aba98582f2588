"""How likely each model is to name the one word left, read off its probabilities, not sampled.

At the endgame benchmark's one-candidate positions (eval/endgame.py, the same split, count
and seed give the same positions), each model is given the teacher's true thought up to its
last sentence and scored on that sentence and the tags: ` Only X remains.</think><guess>
X</guess>` with X the secret. The sum of those tokens' log-probabilities moves with any
change RL makes, where a sampled closing rate of 2-4% needs thousands of answers to show
one: the paired mean difference over the positions, with a bootstrap interval, says
whether a run moved the closing probability at all, on training secrets and held-out ones.
Run from the repository root:

    python -m studies.closing_logprob --adapter A --adapter B --split test --positions 400 --json OUT.json

`--other-secret` also scores, after each position's thought, naming the secret of another
position: the paired difference is what the clues are worth to the model at the naming step
(0 for a model that names words from memory whatever the clues say).
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads: a reference BLAS makes this 50x slower

import click  # noqa: E402
import mlx.core as mx
import numpy as np

from common.errors import run_script
from common.fileio import atomic_write_json
from eval.endgame import EndgamePosition, teacher_positions
from eval.splits import SPLITS
from llm.format import NAMING_WORD, prompt_tokens
from llm.loading import load_model
from sft.cot import truthful_answer
from solver.setup import load_setup

NAMING = f" {NAMING_WORD} "  # where the teacher's thought names the one candidate left


def scored_text(position: EndgamePosition, word: str | None = None) -> tuple[str, str]:
    """(the teacher's answer up to its naming sentence, that sentence and the tags), naming
    `word` instead of the secret where one is given."""
    answer = truthful_answer(position.state, position.secret)
    cut = answer.rindex(NAMING)
    if word is not None:
        return answer[:cut], answer[cut:].replace(position.secret, word)
    return answer[:cut], answer[cut:]


def other_secrets(positions: list[EndgamePosition]) -> list[str]:
    """For each position, the secret of the next one with another secret (in a circle): a word
    the model could name there as readily as the secret if it did not read the clues."""
    secrets = [p.secret for p in positions]
    return [next(w for w in secrets[i + 1:] + secrets[:i] if w != p.secret) for i, p in enumerate(positions)]


def naming_logprob(model, tokenizer, position: EndgamePosition, word: str | None = None) -> tuple[float, int]:
    """Sum of the log-probabilities of the naming sentence's tokens, and how many there are."""
    before, named = scored_text(position, word)
    context = prompt_tokens(tokenizer, position.state, position.rejected) + tokenizer.encode(
        before, add_special_tokens=False)
    target = tokenizer.encode(named, add_special_tokens=False)
    ids = mx.array([context + target])
    logits = model(ids[:, :-1]).astype(mx.float32)
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    picked = mx.take_along_axis(logprobs[0, -len(target):], ids[0, -len(target):, None], axis=-1)
    return float(picked.sum()), len(target)


def paired_interval(a: np.ndarray, b: np.ndarray, resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """The middle 95% of the mean of B - A over positions drawn with replacement."""
    draws = np.random.default_rng(seed).integers(0, len(a), size=(resamples, len(a)))
    low, high = np.percentile((b - a)[draws].mean(axis=1), [2.5, 97.5])
    return float(low), float(high)


@click.command()
@click.option("--model", default="default")
@click.option("--adapter", "adapters", multiple=True, required=True,
              help="An adapter or RL checkpoint folder; give two or more to pair them (the first is A).")
@click.option("--split", type=click.Choice(SPLITS), default="test")
@click.option("--positions", type=click.IntRange(1), default=400, help="As eval --endgame's; one-candidate ones are scored.")
@click.option("--seed", type=click.IntRange(0), default=0)
@click.option("--other-secret", is_flag=True,
              help="Also score naming another position's secret after each thought: what the clues are worth.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(model, adapters, split, positions, seed, other_secret, json_path) -> None:
    setup = load_setup("answers")
    chosen = [p for p in teacher_positions(setup, setup.solver(), SPLITS[split](setup.lists.answers),
                                           positions, seed) if len(p.state.candidates) == 1]
    others = other_secrets(chosen) if other_secret else []
    scores, other_scores, clue_gain = {}, {}, {}
    for adapter in adapters:
        loaded, tokenizer = load_model(model, adapter)
        loaded.eval()
        scores[adapter] = [naming_logprob(loaded, tokenizer, p) for p in chosen]
        mean = np.mean([s for s, _ in scores[adapter]])
        print(f"{adapter}: {len(chosen)} one-candidate {split} positions, mean log p of the naming sentence {mean:.3f}")
        if others:
            other_scores[adapter] = [naming_logprob(loaded, tokenizer, p, w)[0] for p, w in zip(chosen, others)]
            own, other = np.array([s for s, _ in scores[adapter]]), np.array(other_scores[adapter])
            low, high = paired_interval(other, own)
            clue_gain[adapter] = {"mean_difference": round(float((own - other).mean()), 4), "low": round(low, 4),
                                  "high": round(high, 4), "own_higher": int((own > other).sum())}
            print(f"  naming the secret rather than another position's: {clue_gain[adapter]['mean_difference']:+.3f} "
                  f"nats [{low:+.3f}, {high:+.3f}], higher at {clue_gain[adapter]['own_higher']} of {len(chosen)}")
    first = np.array([s for s, _ in scores[adapters[0]]])
    pairs = []
    for adapter in adapters[1:]:
        other = np.array([s for s, _ in scores[adapter]])
        low, high = paired_interval(first, other)
        pairs.append({"a": adapters[0], "b": adapter, "mean_difference": round(float((other - first).mean()), 4),
                      "low": round(low, 4), "high": round(high, 4),
                      "b_higher": int((other > first).sum()), "positions": len(chosen)})
        print(f"{adapter} - {adapters[0]}: {pairs[-1]['mean_difference']:+.3f} nats [{low:+.3f}, {high:+.3f}], "
              f"higher at {pairs[-1]['b_higher']} of {len(chosen)}")
    if json_path:
        atomic_write_json(json_path, {
            "model": model, "split": split, "positions": positions, "seed": seed, "pairs": pairs,
            **({"clue_gain": clue_gain} if others else {}),
            "per_position": [{"key": p.key, "secret": p.secret, **({"other_secret": others[i]} if others else {}),
                              **{a: {"logprob": round(scores[a][i][0], 4), "tokens": scores[a][i][1],
                                     **({"other_logprob": round(other_scores[a][i], 4)} if others else {})}
                                 for a in adapters}}
                             for i, p in enumerate(chosen)]})


if __name__ == "__main__":
    run_script(main)
