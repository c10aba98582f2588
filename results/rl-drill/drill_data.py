"""SFT data for the drill-only control: the candidates expert's answer right after RAISE, one
example per pattern, for the K patterns the most training secrets give (no other positions).

    python results/rl-drill/drill_data.py 40 runs/drill/data40
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from eval.splits import trainable  # noqa: E402
from llm.format import messages  # noqa: E402
from sft.cot import expert_answer  # noqa: E402
from sft.states import frequent_positions  # noqa: E402
from solver.policy import expert_policy  # noqa: E402
from solver.setup import load_setup  # noqa: E402

k, out = int(sys.argv[1]), Path(sys.argv[2])
setup = load_setup("answers")
expert = expert_policy(setup.solver(), "candidates")
openings = frequent_positions(setup, expert, trainable(setup.lists.secrets("answers")), k)  # after RAISE
rows = [json.dumps({"messages": messages(s.state) + [{"role": "assistant", "content": expert_answer(expert, s.state)}]})
        for s in openings]
out.mkdir(parents=True, exist_ok=True)
(out / "train.jsonl").write_text("\n".join(rows) + "\n")
(out / "valid.jsonl").write_text("\n".join(rows[:8]) + "\n")
(out / "manifest.json").write_text(json.dumps({"secrets": {"train": [s.secret for s in openings]}}))
print(len(rows), "examples")
