"""Where each advantage scale puts a GRPO step's weight, measured on the groups real runs logged.

    python -m studies.advantage RUN [RUN ...] [--json FILE]

Every GRPO step of an RL run logs the rewards of all its groups (`group_rewards` in
RUN/metrics.jsonl). For each tie threshold and advantage scale this replays what the
update would have weighted: the share of the step's total |advantage| that lands on
groups whose rewards hold a win and a non-win, a playable answer and an unplayable
one, only differences in move quality, or differences smaller than 0.1 (a sentence of
the thought, a sliver of information: noise next to a win, which is worth 2-3 points).
The default scale and threshold (rl/grpo.py) were chosen from this table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from common.errors import UserError
from rl.grpo import ADVANTAGE_SCALES, advantages
from rl.reward import RewardWeights

THRESHOLDS = (0.0, 0.05, 0.1)
NEAR_TIE = 0.1
KINDS = ("win", "playable", "quality", "near_tie")


def group_kind(rewards: np.ndarray, weights: RewardWeights = RewardWeights()) -> str:
    """What separates a group's best answer from its worst (a win scores at least `win`, an
    unplayable answer exactly 0, a playable one at least format + valid)."""
    spread = float(np.ptp(rewards))
    if spread < NEAR_TIE:
        return "near_tie"
    if rewards.max() >= weights.win and rewards.min() < weights.win:
        return "win"
    if rewards.min() == 0.0 and rewards.max() >= weights.format + weights.valid:
        return "playable"
    return "quality"


def weight_shares(steps: list[list[np.ndarray]], scale: str, threshold: float) -> dict[str, float]:
    """Share of all |advantage| (summed over steps) per kind of group, and the groups kept."""
    mass = dict.fromkeys(KINDS, 0.0)
    kept = total = 0
    for groups in steps:
        total += len(groups)
        informative = [g for g in groups if np.ptp(g) >= max(threshold, 1e-9)]
        kept += len(informative)
        for group, adv in zip(informative, advantages(informative, scale)):
            mass[group_kind(group)] += float(np.abs(adv).sum())
    whole = sum(mass.values()) or 1.0
    return {**{k: round(v / whole, 4) for k, v in mass.items()}, "kept_groups": kept, "groups": total}


def logged_steps(runs: list[str]) -> list[list[np.ndarray]]:
    """Each GRPO step's group rewards, from the runs' metrics (unreadable lines are skipped)."""
    from rl.report import load_metrics

    steps = []
    for run in runs:
        for record in load_metrics(run):
            if record.get("phase") == "grpo" and record.get("group_rewards"):
                steps.append([np.array(g, dtype=np.float64) for g in record["group_rewards"]])
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="RL run folders (their metrics.jsonl)")
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args(argv)
    try:
        steps = logged_steps(args.runs)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not steps:
        print("error: no GRPO step with group_rewards in those runs", file=sys.stderr)
        return 2
    kinds = [group_kind(g) for s in steps for g in s]
    table = [{"scale": scale, "tie_threshold": t, **weight_shares(steps, scale, t)}
             for t in THRESHOLDS for scale in ADVANTAGE_SCALES]
    print(f"{len(steps)} GRPO steps, {len(kinds)} groups: " + ", ".join(f"{k} {kinds.count(k)}" for k in KINDS))
    print(f"{'scale':6} {'tie':>5} " + " ".join(f"{k:>9}" for k in KINDS) + "  kept")
    for row in table:
        print(f"{row['scale']:6} {row['tie_threshold']:5.2f} " + " ".join(f"{row[k]:9.1%}" for k in KINDS)
              + f"  {row['kept_groups']}/{row['groups']}")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"runs": args.runs, "steps": len(steps), "table": table},
                                                   indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
