"""`rl` (train with GRPO and filtered expert iteration) and `report` (its curves)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import click

from common.errors import UserError
from common.knobs import param_name
from common.options import (json_option, note_unread, refuse_out_over_inputs, refuse_owned_output, writable_file,
                            writable_folder)
from rl.config import KNOBS
from sft.run_folder import claim, continues, note_if_begun, note_starts_again, refuse_changes

HELD_OUT_KEYS = ("heldout_", "best_")  # shown by heldout_table, not summary_table
FLAGGED = [entry for entry in KNOBS.values() if entry.knob.flag]  # the knobs a flag of `rl` sets
OVERRIDES = {param_name(entry.knob.flag): entry.key for entry in FLAGGED}  # each flag's config key
FLAGS = {entry.key: entry.knob.flag for entry in FLAGGED}  # each key's flag, for messages
# The settings only one kind of RL reads. Head RL (rl/head_loop.py) draws words from the head at
# recorded states: no groups of answers, no LoRA optimizer or KL to a reference, no start states,
# no held-out games (it chooses RUN/best on validation positions). LoRA RL has no head to train.
LORA_RL_ONLY = ("rollout.group_size", "rollout.games_per_round", "rollout.start", "rollout.start_games",
                "rollout.any_share", "rollout.turns", "grpo.learning_rate", "grpo.kl_coef",
                "grpo.micro_batch_tokens", "grpo.groups_per_step", "eval_games", "eval_endgame", "best_by")
HEAD_RL_ONLY = ("head.games", "head.params")


def override_options(f: Callable) -> Callable:
    """One option per flagged knob, None unless given (then the config file, else the default, decides)."""
    for entry in reversed(FLAGGED):
        f = click.option(entry.knob.flag, type=entry.kind, default=None,
                         help=f"{entry.knob.help} [default: {entry.default}]")(f)
    return f


@click.command("rl")
@click.option("--model", default=None,
              help="mlx-lm model folder, Hugging Face id, or 'default' (SmolLM2-135M-Instruct, embedded) "
                   "[default: default].")
@click.option("--adapter", type=click.Path(file_okay=False), default=None,
              help="LoRA adapter to start from (an SFT run's RUN/adapter); it is also the KL reference. "
                   "Default: none (a fresh adapter on the base model).")
@click.option("--out", required=True, type=click.Path(file_okay=False), callback=writable_folder,
              help="Run folder to write.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="JSON or YAML file with any of the settings (see rl/config.py); flags override it.")
@override_options
@click.option("--resume", is_flag=True, help="Continue the run in --out from its last checkpoint (running the same "
                                             "command again does too); flags left out are the run's own, only "
                                             "--steps may change.")
@click.option("--quiet", is_flag=True, help="No live view.")
@json_option
def rl_command(model, adapter, out, config_path, resume, quiet, json_path, **flags) -> None:
    """Train a LoRA adapter with GRPO on whole games, alternating with filtered expert iteration.

    When --adapter has a naming head beside it (naming-head writes one), RL trains that head
    instead, the model frozen (--head off: the LoRA): the model plays --head-games training games
    with it, and GRPO and expert iteration train the head's word choice at the states where it
    named a word (where the model writes ' Only', a whole allowed word, never a played or refused
    one): its three gains by default (how much it trusts the model's own word scores, its
    correction and its letter scores), all its arrays with --head-params arrays; RUN/best is the
    start adapter with the head chosen on held-out validation positions.

    Run the same command again to continue the run in --out from its last checkpoint (a run
    that never reached one starts again). Its flags and --config are compared with the run's
    record: the same values are fine, another is an error naming the flag; --steps may grow.
    """
    from rich.console import Console

    from common.fileio import atomic_write_json
    from rl.loop import run_rl

    files = [("--config", config_path), ("--start-games", flags["start_games"])]
    refuse_owned_output(json_path, "--json", [("--out", out), ("--adapter", adapter), ("--model", model)], files)
    refuse_out_over_inputs(out, [("--adapter", adapter), ("--model", model), *files])
    given = {name: value for name, value in flags.items() if value is not None}
    overrides = {OVERRIDES[name]: value for name, value in given.items()}
    request = run_request(Path(out), model, adapter, config_path, overrides, resume, not quiet)
    _note_unread(overrides, request)
    summary = run_rl(request)
    if summary is None:  # a process other than rank 0 under mlx.launch: rank 0 reports
        return
    Console().print(summary_table(summary), *([heldout_table(summary)] if summary.get("heldout_last") else []))
    if json_path:
        atomic_write_json(json_path, summary)


def run_request(out: Path, model: str | None, adapter: str | None, config_path: str | None, overrides: dict,
                resume: bool, show_progress: bool):
    """The run to do: a new one, or the run in `out` continued, under the one resume rule
    (sft/run_folder.py). Only --steps may change, to run longer."""
    from common.fileio import read_json
    from rl.config import build_config, check_values, load_config_file
    from rl.loop import RUN_FILE, RunRequest, resume_request

    check_values(overrides, FLAGS)  # a bad flag is named as itself before any file is read
    claim(out, "rl")
    if not continues(out, resume):
        data, where = (load_config_file(config_path), f"config {config_path}") if config_path else ({}, "options")
        flags = {key: FLAGS[key] for key in overrides} if config_path else FLAGS  # without a file, every key is a flag's
        config = build_config(data, overrides, where, flags)
        note_if_begun(out)
        return RunRequest(model or "default", adapter, out, config, show_progress=show_progress)
    if (out / RUN_FILE).is_file():  # read here first: resume_request's reader shows Python's words for a binary one
        read_json(out / RUN_FILE, "RL run record")
    request = resume_request(out, overrides.get("steps"), show_progress)
    refuse_changes(out, "an RL run", changed_settings(request, model, adapter, config_path, overrides),
                   "only --steps may change")
    if not request.resume:
        note_starts_again(out)
    _refuse_fewer_steps(request)
    return request


def _note_unread(overrides: dict, request) -> None:
    """A note for each flag given that the kind of RL this run does leaves unread."""
    from rl.loop import trains_head

    if trains_head(request):
        note_unread([FLAGS[key] for key in LORA_RL_ONLY if key in overrides],
                    "the start adapter has a naming head, so rl trains the head (head RL), not a LoRA "
                    "(--head off trains the LoRA)")
    else:
        why = "--head off" if request.config.head.train == "off" else "the start adapter has no naming head"
        note_unread([FLAGS[key] for key in HEAD_RL_ONLY if key in overrides],
                    f"rl trains a LoRA here ({why}); head RL trains a naming head fitted on --adapter (naming-head)")


def _refuse_fewer_steps(request) -> None:
    """A continued run's --steps may grow, never fall below the steps it has done (checked before
    the model loads, and named as the flag it is)."""
    from sft.checkpoint import checkpoint_step

    done = checkpoint_step(request.out) if request.resume else None
    if done is not None and request.config.steps < done:
        raise UserError(f"--steps {request.config.steps}: the run in {request.out} has done {done} steps already; "
                        f"give --steps {done} or more to run it longer, or choose another --out for a new run")


def changed_settings(request, model: str | None, adapter: str | None, config_path: str | None,
                     overrides: dict) -> list[str]:
    """The flags whose values differ from the saved run's (--steps may differ)."""
    import dataclasses

    from llm.adapter_files import ADAPTER_WEIGHTS
    from llm.loading import portable_spec
    from rl.config import build_config, load_config_file
    from rl.loop import CONFIG_FILE

    changed = []
    if model is not None and portable_spec(model) != request.model:
        changed.append("--model")
    if adapter is not None and (request.adapter is None or not _same_file(Path(adapter) / ADAPTER_WEIGHTS,
                                                                          Path(request.adapter) / ADAPTER_WEIGHTS)):
        changed.append("--adapter")
    saved = _flat(dataclasses.replace(request.config, steps=0).to_json())
    flags = {key: FLAGS[key] for key in overrides}
    if config_path is not None:  # the whole file is compared, each flag over it
        asked = build_config(load_config_file(config_path), overrides, f"config {config_path}", flags)
    else:  # the flags alone, over the run's own settings
        asked = build_config(request.config.to_json(), overrides, str(request.out / CONFIG_FILE), flags)
    asked = _flat(dataclasses.replace(asked, steps=0).to_json())
    return changed + sorted({flags.get(key, f"--config ({key})") for key, value in asked.items() if saved[key] != value})


def _flat(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def summary_table(summary: dict):
    from rich.table import Table

    table = Table(title=f"RL run {summary['run']}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        if isinstance(value, dict) or key.startswith(HELD_OUT_KEYS):
            continue
        if value is None:
            shown = "-"
        elif isinstance(value, float):
            shown = f"{value:.4g}"
        else:
            shown = str(value)
        table.add_row(key.replace("_", " "), shown)
    return table


def heldout_table(summary: dict):
    """The held-out evals at the start, the best (RUN/best) and the last, side by side."""
    from rich.table import Table

    from eval.report import FIGURES
    from eval.validation import FIGURES as HELD_OUT_FIGURES

    from eval.report import ENDGAME_LABELS
    from rl.heldout import ENDGAME

    evals = [(name, summary[f"heldout_{name}"]) for name in ("start", "best", "last") if summary[f"heldout_{name}"]]
    last = summary["heldout_last"]
    played = [f"{last['games']} games" if "games" in last else None,
              f"{last[ENDGAME + 'positions']} endgame positions" if ENDGAME + "positions" in last else None]
    table = Table(title=f"held-out validation: {', '.join(filter(None, played))} sampled at temperature "
                        f"{last.get('temperature', last.get(ENDGAME + 'temperature'))}",
                  caption=f"best kept in {summary['best_adapter']}" if summary["best_adapter"] else None)
    table.add_column("figure")
    for name, figures in evals:
        table.add_column(f"{name} (step {figures['step']})", justify="right")
    rows = [(label, key, pattern) for label, key, pattern in
            FIGURES if key in HELD_OUT_FIGURES]
    rows += [(f"endgame: {label}", ENDGAME + key, "{:.1%}") for key, label in ENDGAME_LABELS.items()]
    for label, key, pattern in rows:
        if any(key in f for _, f in evals):
            table.add_row(label, *("-" if f.get(key) is None else pattern.format(f[key]) for _, f in evals))
    return table


@click.command("report")
@click.argument("run", type=click.Path(file_okay=False))
@json_option
@click.option("--png", type=click.Path(dir_okay=False), default=None, callback=writable_file,
              help="Also draw the curves into this PNG (needs matplotlib).")
def report_command(run, json_path, png) -> None:
    """Curves of an RL run (cumulative wins, reward, win rate, held-out evals) or an SFT run's."""
    from common.fileio import atomic_write_json
    from rl.report import show_report, write_png

    for flag, path in (("--json", json_path), ("--png", png)):
        refuse_owned_output(path, flag, [("RUN", run)])
    series, title = show_report(run)
    if png:
        write_png(series, png, title)
    if json_path:
        atomic_write_json(json_path, {"run": str(run), "title": title, "curves": series})
