"""The second answer alone: K answers (0.7) right after RAISE at each of the 32 test secrets of
results/pipeline-candidates/eval-sft.json, the position eval's games reach after a RAISE opener
(results/rl-drill/). Run from the repository root:

    python -m studies.second_answer_probe ADAPTER OUT.json [K]

Writes the shares of answers in format, playable and fitting the clues, and every answer.
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads

import json  # noqa: E402
import sys
from pathlib import Path

import mlx.core as mx

from llm.format import parse_answer, prompt_tokens
from llm.generation import SamplingSettings, sample
from llm.loading import load_model
from sft.states import secret_columns
from solver.setup import load_setup

SECRETS_FROM = Path(__file__).resolve().parents[1] / "results/pipeline-candidates/eval-sft.json"


def main(adapter: str, out: str, k: int = 4) -> None:
    setup = load_setup("answers")
    lists, columns = setup.lists, secret_columns(setup)
    secrets = [g["secret"] for g in json.loads(SECRETS_FROM.read_text())["per_game"]]
    row = setup.matrix[lists.index("raise")]
    states = [setup.start.play("raise", int(row[columns[s]])) for s in secrets]
    model, tokenizer = load_model("default", adapter)
    mx.random.seed(0)
    answers = sample(model, tokenizer, [prompt_tokens(tokenizer, s) for s in states], k, SamplingSettings(0.7, 1.0, 160))
    records = []
    for secret, state, group in zip(secrets, states, answers):
        for a in group:
            p = parse_answer(a.text, lists, state.guesses)
            records.append({"secret": secret, "text": a.text, "format_ok": p.format_ok, "playable": p.ok,
                            "consistent": bool(p.ok and state.constraints.allows(p.guess))})
    n = len(records)
    summary = {"adapter": adapter, "temperature": 0.7, "answers": n,
               **{f"{key}_share": sum(r[key] for r in records) / n for key in ("format_ok", "playable", "consistent")}}
    print(json.dumps(summary))
    Path(out).write_text(json.dumps({**summary, "records": records}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 4)
