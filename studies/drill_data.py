"""SFT data for the drill-only control of results/rl-drill/: the candidates expert's answer right
after RAISE, one example per pattern, for the K patterns the most training secrets give (no other
positions). Run from the repository root:

    python -m studies.drill_data 40 runs/drill/data40
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from eval.splits import trainable
from llm.format import messages
from sft.cot import expert_answer
from sft.states import frequent_positions
from solver.policy import expert_policy
from solver.setup import load_setup


def main(k: int, out: Path) -> None:
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


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
