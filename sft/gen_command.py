"""`gen-sft`: solver games -> chain-of-thought SFT data (datasets + mlx-lm JSONL + manifest)."""

from __future__ import annotations

import gc
import time
from contextlib import nullcontext
from pathlib import Path

import click
from rich.table import Table

from common.errors import UserError
from common.fileio import atomic_replace_dir, atomic_write_json
from common.knobs import knobs_of
from common.options import json_option, knob_options, refuse_out_over_inputs, refuse_owned_output, replaced_folder
from sft.gen_data import GenSettings
from solver.options import solver_options, word_list_inputs, word_list_options
from solver.policy import SolverSettings


@click.command("gen-sft")
@click.option("--out", required=True, type=click.Path(), callback=replaced_folder,
              help="Folder for the dataset (built aside, then swapped in).")
@word_list_options()
@solver_options
@knob_options(knobs_of(GenSettings).values())
@click.option("--model", default=None,
              help="Tokenizer for the token statistics (default: the default model's, if cached).")
@click.option("--overwrite", is_flag=True, help="Replace the gen-sft dataset in --out (another command's output "
                                                "is never replaced).")
@click.option("--cold", is_flag=True,
              help="Ignore the solver's decisions stored by earlier runs (to time a first run).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
def gen_sft(out, secrets, answers, allowed, hard, lookahead, top_k, model, overwrite, cold, quiet, json_path,
            **knobs) -> None:
    """Play solver games and write one chain-of-thought example per solver turn, split by secret."""
    from rich.console import Console

    from common.run_lock import run_lock

    refuse_owned_output(json_path, "--json", [("--out", out), ("--model", model)], word_list_inputs(answers, allowed))
    refuse_out_over_inputs(out, [*word_list_inputs(answers, allowed), ("--model", model)])
    check_out_path(Path(out))
    with run_lock(out):  # no run may be writing into the folder this one replaces
        check_out_dir(Path(out), overwrite)
        result = generate_dataset(Path(out), GenSettings(**knobs), model, secrets, answers, allowed,
                                  SolverSettings(hard=hard, lookahead=lookahead, top_k=top_k),
                                  show_progress=not quiet, cold=cold)
    if json_path:
        atomic_write_json(json_path, result)
    Console().print(summary_table(result))


def generate_dataset(out: Path, settings: GenSettings, model: str | None, secret_kind: str = "answers",
                     answers: str | None = None, allowed: str | None = None,
                     solver_settings: SolverSettings = SolverSettings(), show_progress: bool = True,
                     cold: bool = False) -> dict:
    """Play, write `out` atomically, and return the summary (also the body of manifest.json).

    The solver's decisions from earlier runs are read from disk (and new ones added)
    unless `cold`; the output is the same either way.
    """
    import numpy as np

    from sft.gen_data import (deal_games, play_examples, secrets_by_split, secrets_used, split_summary,
                              token_lengths, write_dataset)
    from common.run_kinds import OUTPUTS
    from common.progress import progress_bar
    from solver.decision_store import remembered
    from solver.entropy import guess_score
    from solver.policy import expert_policy
    from solver.setup import load_setup

    setup = load_setup(secret_kind, answers, allowed)
    solver = setup.solver(solver_settings)
    # Entered before any of the solver's work: a store that cannot be written is refused first.
    with nullcontext(0) if cold else remembered(solver) as stored_decisions:
        # Start-up work stays off the clock, which times the per-example work: the opener
        # (computed once, then cached), the compiled kernels' load, the datasets import.
        solver.opener()
        solver.load_kernels()
        guess_score(setup.matrix, 0, setup.start.candidates)
        import datasets  # noqa: F401
        tokenizer, tokenizer_name = load_tokenizer(model)
        gc.freeze()  # the start-up's objects (transformers, datasets) stay out of the run's collections
        rng = np.random.default_rng(settings.seed)
        dealt = deal_games(secrets_by_split(setup.lists.secrets(secret_kind)), settings.games, rng)

        started = time.perf_counter()
        progress = progress_bar("games", disable=not show_progress)
        teacher = expert_policy(solver, settings.expert)
        with progress:
            task = progress.add_task("gen-sft", total=len(dealt))
            examples = play_examples(setup, teacher, dealt, rng, settings.max_history, settings.off_policy,
                                     settings.rejected, on_game=lambda: progress.advance(task))
    played = time.perf_counter()
    prompt_tokens, answer_tokens = token_lengths(examples, tokenizer)
    counted = time.perf_counter()
    manifest = {
        "examples": len(examples),
        "splits": split_summary(examples, prompt_tokens, answer_tokens),
        "seed": settings.seed,
        "games": settings.games,
        "max_history": settings.max_history,
        "off_policy": settings.off_policy,
        "rejected": settings.rejected,
        "solver": {"name": solver.name, "expert": settings.expert, "hard": solver_settings.hard,
                   "lookahead": solver_settings.lookahead, "top_k": solver_settings.top_k},
        "word_lists": {"fingerprint": setup.lists.fingerprint, "secrets": secret_kind,
                       "answers": len(setup.lists.answers), "allowed": len(setup.lists.allowed)},
        "tokenizer": tokenizer_name,
        "format": "mlx-lm chat JSONL ({split}.jsonl) and a datasets DatasetDict (hf/)",
        "secrets": secrets_used(examples),
        "files": sorted(OUTPUTS["gen-sft"].names),  # what --overwrite may delete (sft/run_folder.py)
    }
    atomic_replace_dir(out, lambda folder: write_dataset(folder, examples, manifest))
    done = time.perf_counter()
    seconds = done - started
    return {
        "out": str(out),
        **{k: v for k, v in manifest.items() if k not in ("secrets", "files")},
        "seconds": round(seconds, 3),
        "play_seconds": round(played - started, 3),
        "token_seconds": round(counted - played, 3),
        "write_seconds": round(done - counted, 3),
        "examples_per_second": round(len(examples) / seconds, 1),
        "stored_decisions_used": stored_decisions,
    }


def load_tokenizer(model: str | None):
    """(tokenizer, its name) for the token statistics; (None, why) when none is at hand."""
    from llm.default_model import cached_path, is_default_cached
    from sft.gen_data import CHARS_PER_TOKEN

    if model is None:
        if not is_default_cached():
            return None, (f"approximate (default model not cached): characters / {CHARS_PER_TOKEN['prompt']} "
                          f"(prompt), / {CHARS_PER_TOKEN['answer']} (answer)")
        path, model = cached_path(), "default"
    else:
        from llm.loading import resolve_model

        path = resolve_model(model)
    from mlx_lm.utils import load_tokenizer as mlx_load_tokenizer

    try:
        return mlx_load_tokenizer(path), model
    except (OSError, ValueError) as err:
        raise UserError(f"cannot load a tokenizer from {path}: {' '.join(str(err).split())[:300]}") from err


def summary_table(result: dict) -> Table:
    table = Table(title=f"gen-sft: {result['examples']:,} examples in {result['out']} "
                        f"({result['seconds']:.1f} s, {result['examples_per_second']:,.0f} examples/s)")
    # Short headers and a/b token figures keep the table within 80 columns.
    for column in ("split", "games", "secrets", "examples", "off-pol.", "refused", "prompt", "answer"):
        table.add_column(column, justify="left" if column == "split" else "right")
    for split, row in result["splits"].items():
        prompt, answer = row["prompt_tokens"], row["answer_tokens"]
        table.add_row(split, f"{row['games']:,}", f"{row['secrets']:,}", f"{row['examples']:,}",
                      f"{row['off_policy_examples']:,}", f"{row['rejected_examples']:,}",
                      f"{prompt['mean']:.0f}/{prompt['max']}",
                      f"{answer['mean']:.0f}/{answer['max']}")
    table.caption = (f"prompt and answer: tokens, mean/max ({result['tokenizer']}); "
                     f"solver: {result['solver']['name']}; seed {result['seed']}")
    return table


def check_out_path(out: Path) -> None:
    """Refuse, before taking its lock, an --out that is a file or that holds the working directory."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder")
    if out.is_dir() and Path.cwd().resolve().is_relative_to(out.resolve()):
        raise UserError(f"--out {out} is the folder you are in (or holds it); gen-sft replaces its --out whole: "
                        "name a folder of its own, e.g. --out data")


def check_out_dir(out: Path, overwrite: bool) -> None:
    """Holding its lock: --out is empty, or a dataset that --overwrite may replace, holding nothing
    gen-sft did not write (sft/run_folder.py: never another command's output, nor a user's file)."""
    from sft.run_folder import claim, entries, refuse_foreign

    claim(out, "gen-sft")
    if entries(out) and not overwrite:
        raise UserError(f"--out {out} exists and is not empty; pass --overwrite to replace it")
    refuse_foreign(out, "gen-sft")
