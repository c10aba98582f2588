"""The sampled policy gradient of studies/sampled_gains.py, in reward units, over its steps, beside
the exact slope of the frozen-text objective (studies/output_rl_gains.py `slopes`).

A step logs the gradient of REINFORCE's loss with advantages scaled by the rewards' spread, and
each game's share of it (`policy_grad_se`); times minus that spread it is the slope of the mean
reward of an answer in each gain, the frozen objective's unit. Steps are independent draws of
games, so their mean has the standard error sqrt(sum of se^2) / steps. A grouped run
(`--group-size`) logs both baselines on its own games; each is summarised the same way under
`baselines`, so their standard errors compare on the same answers.

    python -m studies.sampled_gradient --metrics runs/orl-sampled/sampled_metrics.jsonl \
        --slopes runs/log/every-slopes.json --json out.json
"""

from __future__ import annotations

import json
import math

import click

from common.errors import run_script
from rl.output_rl import GAINS


@click.command()
@click.option("--metrics", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--slopes", required=True, type=click.Path(exists=True, dir_okay=False),
              help="studies.output_rl_gains's JSON: its first reading is at (1, 1, 0).")
@click.option("--json", "json_out", required=True, type=click.Path(dir_okay=False))
def main(metrics: str, slopes: str, json_out: str) -> None:
    from common.fileio import atomic_write_json, read_json

    with open(metrics) as lines:
        steps = [json.loads(line) for line in lines if line.strip()]
    measured = [s for s in steps if "policy_grad_se" in s]
    if not measured:
        raise click.UsageError(f"{metrics} has no step with the games' shares of the gradient")
    by_step = {s["step"]: s for s in steps}
    frozen = read_json(slopes, "an output_rl_gains JSON")["readings"][0]["slopes"]
    # a run that answered positions (--positions-from) plays no games: its unit is the answer
    unit = "games" if all(s["games"] for s in measured) else "answers"
    samples = sum(s[unit] for s in measured)

    def summary(gradients: list[tuple[dict, dict]]) -> dict:
        """The mean slope over the steps, its standard error, and the games (or answers) it would take at 2 se."""
        per_step = [{"step": s["step"], "gains_before": {g: by_step.get(s["step"] - 1, {}).get(g) for g in GAINS},
                     **{g: round(-grad[g] * s["reward_std"], 6) for g in GAINS},
                     **{f"{g}_se": round(se[g] * s["reward_std"], 6) for g in GAINS}}
                    for s, (grad, se) in zip(measured, gradients)]
        mean = {g: sum(p[g] for p in per_step) / len(per_step) for g in GAINS}
        error = {g: math.sqrt(sum(p[f"{g}_se"] ** 2 for p in per_step)) / len(per_step) for g in GAINS}
        return {"sampled_slope": {g: round(mean[g], 6) for g in GAINS},
                "sampled_slope_se": {g: round(error[g], 6) for g in GAINS}, "per_step": per_step,
                # the standard error falls as one over the root of the games (answers)
                f"{unit}_for_two_se_of_frozen_slope": {
                    g: round(samples * (2 * error[g] / frozen["own"]["gradient"][g]) ** 2) for g in GAINS}}

    used = summary([(s["policy_grad"], s["policy_grad_se"]) for s in measured])
    result = {"steps": len(measured), "games": sum(s["games"] for s in measured),
              "answers": sum(s["answers"] for s in measured),
              "group_size": measured[0].get("group_size", 1), **used, "frozen_slope_at_start": frozen}
    if all("baselines" in s for s in measured):
        result["baselines"] = {name: summary([(s["baselines"][name]["grad"], s["baselines"][name]["se"])
                                              for s in measured]) for name in measured[0]["baselines"]}
    atomic_write_json(json_out, result)
    for g in GAINS:
        mean, se = result["sampled_slope"][g], result["sampled_slope_se"][g]
        click.echo(f"{g}: sampled {mean:+.4f} ± {se:.4f} over {result[unit]} {unit}; frozen "
                   f"{frozen['own']['gradient'][g]:+.4f} ± {frozen['own']['gradient_se'][g]:.4f}; {unit} for the "
                   f"frozen slope at 2 se: {result[f'{unit}_for_two_se_of_frozen_slope'][g]}")


if __name__ == "__main__":
    run_script(main)
