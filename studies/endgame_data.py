"""An SFT data folder of endgame positions only: can the model learn to close at all?

Every RL run from ../shared/adapters/gpu-sft-2400 left the held-out closing rate where it
was, and at held-out one-candidate positions that model names a word it was taught as a
training secret 108 times in 152 (the secret 4). This writes the teacher's answers at
endgame positions (1-6 candidates left, the positions `rl`'s `rollout.start: endgame` and
`eval --endgame` use, a `--rejected` share naming refused answers as eval does) on the
training secrets, as `sft --data` reads them, so that a continued SFT run says whether
dense teaching of these positions moves the held-out rate where sampled rewards did not.
Optionally a share of a `gen-sft` folder's examples rides along (`--mix`), so that the
rest of the game is not forgotten. Run from the repository root:

    python -m studies.endgame_data --out runs/endgame-data --examples 4000 --seed 0
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from common.errors import run_script
from common.fileio import atomic_write_text, read_jsonl
from eval.splits import trainable
from llm.format import messages
from llm.histories import DEFAULT_OFF_POLICY, DEFAULT_REJECTED, ENDGAME_CANDIDATES, sample_rejections
from sft.cot import expert_answer
from sft.states import sample_endgame_states
from solver.setup import load_setup

VALID_SHARE = 0.05


def endgame_examples(count: int, seed: int, rejected: float, secret_kind: str = "answers") -> list[dict]:
    """`count` endgame examples on the training words of `secret_kind`'s list, taught by the
    solver that draws the histories (proof-free with the allowed list: solver/policy.py)."""
    setup = load_setup(secret_kind)
    solver = setup.solver().for_histories()
    rng = np.random.default_rng(seed)
    secrets = trainable(setup.lists.secrets(secret_kind))
    starts = sample_endgame_states(setup, solver, secrets, count, rng, ENDGAME_CANDIDATES, DEFAULT_OFF_POLICY)
    return [{"messages": messages(s.state, sample_rejections(s.state, rng, rejected))
             + [{"role": "assistant", "content": expert_answer(solver, s.state)}]} for s in starts]


@click.command()
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Data folder to write.")
@click.option("--examples", default=4000, type=click.IntRange(1), help="Endgame examples.")
@click.option("--rejected", default=DEFAULT_REJECTED, type=click.FloatRange(0, 1),
              help="Share of prompts naming one or two refused answers.")
@click.option("--mix", type=click.Path(exists=True, file_okay=False), help="A gen-sft folder to mix in.")
@click.option("--mix-share", default=0.0, type=click.FloatRange(0, 0.95), help="Share of the examples from --mix.")
@click.option("--secrets", "secret_kind", default="answers", type=click.Choice(["answers", "allowed"]),
              help="The list the secrets (training words only) come from.")
@click.option("--seed", default=0, type=int)
def main(out: str, examples: int, rejected: float, mix: str | None, mix_share: float, secret_kind: str,
         seed: int) -> None:
    rows = endgame_examples(examples, seed, rejected, secret_kind)
    rng = np.random.default_rng(seed + 1)
    if mix and mix_share > 0:
        pool = [json.loads(line) for _, line in read_jsonl(Path(mix) / "train.jsonl", "gen-sft data")]
        extra = int(round(len(rows) * mix_share / (1 - mix_share)))
        rows += [pool[i] for i in rng.choice(len(pool), size=min(extra, len(pool)), replace=False)]
    rows = [rows[i] for i in rng.permutation(len(rows))]
    n_valid = max(1, int(len(rows) * VALID_SHARE))
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name, part in (("valid", rows[:n_valid]), ("train", rows[n_valid:])):
        atomic_write_text(folder / f"{name}.jsonl", "".join(json.dumps(r) + "\n" for r in part))
    print(f"{len(rows) - n_valid} train, {n_valid} valid examples in {folder}")


if __name__ == "__main__":
    run_script(main)
