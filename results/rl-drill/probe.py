"""The second answer alone: K answers (0.7) right after RAISE at each of the 32 test secrets of
`../pipeline-candidates/eval-sft.json`, the position eval's games reach after a RAISE opener.

    python results/rl-drill/probe.py ADAPTER OUT.json [K]

Writes the shares of answers in format, playable and fitting the clues, and every answer.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from llm.blas import ensure_fast_blas  # noqa: E402

ensure_fast_blas()
import mlx.core as mx  # noqa: E402

from llm.format import parse_answer, prompt_tokens  # noqa: E402
from llm.generation import SamplingSettings, sample  # noqa: E402
from llm.loading import load_model  # noqa: E402
from sft.states import secret_columns  # noqa: E402
from solver.setup import load_setup  # noqa: E402

adapter, out, k = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 4
setup = load_setup("answers")
lists, columns = setup.lists, secret_columns(setup)
here = Path(__file__).resolve().parent
secrets = [g["secret"] for g in json.loads((here.parent / "pipeline-candidates/eval-sft.json").read_text())["per_game"]]
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
