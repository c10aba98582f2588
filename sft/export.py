"""`export`: an adapter fused into a standalone mlx-lm model folder that plays as trained anywhere
mlx-lm runs, with the prompt format it was trained on written beside it.

What SFT and RL leave is an adapter that only this toolkit applies as it was trained: an RL
checkpoint is a LoRA over its fused start (`stacked_on`, rl/lora_loop.py), RL's `best/` and `adapter/`
are start and RL adapters side by side (rl/policy.py `merged_adapter`), and a naming head is a
readout beside the adapter that only the toolkit's decoding uses. Export loads the adapter exactly
as `eval` does (llm/loading.py, stacked adapters included) and writes it through `sft --fuse`'s
checked writer (sft/fuse.py): the folder appears only once, reloaded from disk, it answers the
positions of an example game token for token as the adapter does at greedy decoding.

A model without its prompt is of little use elsewhere, so the folder also holds PROMPT.md (for a
reader) and export.json (for a program: the record of what was fused, and the format), both made
from llm/format.py and the solver's own answers at the example game's positions, so neither can
drift from what training showed the model. export.json also marks the folder as an export: a later
export may replace it; a folder holding anything else is never replaced.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

from common.errors import UserError, note
from common.fileio import read_json
from llm.adapter_files import ADAPTER_WEIGHTS, STACKED_ON, read_adapter_config
from solver.state import GameState

RECORD = "export.json"  # what was fused and the prompt format; its presence marks an earlier export
PROMPT_DOC = "PROMPT.md"
KIND = "wordle-rl export"
EXAMPLE_SECRET = "gorge"  # a training answer whose solver game has four positions, the last naming the one left
HEAD_RULE = ("A naming head (naming_head.npz beside an adapter) does not travel as a file: it is a readout that "
             "only wordle-rl's decoding applies, so an export without `--fold-head` plays without it, as `eval "
             "--adapter DIR --no-naming-head` plays the adapter. `export --fold-head` folds it into the model as one "
             "token per allowed word (sft/fold_head.py), which any runtime plays.")
FOLDED_RULE = ("The naming head is folded in: each allowed word is one token of its own (the tokenizer's "
               "vocabulary grew by the words), scored at the naming word as the head scores it and shut "
               "elsewhere; mlx-lm, or any runtime that reads tokenizer.json, plays it with no wordle-rl code.")


@dataclass(frozen=True)
class Position:
    """A position of the example game and the solver's answer there, as SFT taught the model to write it."""

    state: GameState
    answer: str


def example_game(secret: str = EXAMPLE_SECRET) -> list[Position]:
    """Every position of the solver's game on `secret`, from the opening on."""
    from sft.cot import expert_move
    from solver.setup import load_setup

    setup = load_setup("answers")
    solver, state, column = setup.solver(), setup.start, setup.lists.answers.index(secret)
    positions = []
    while not state.over:
        guess, answer = expert_move(solver, state)
        positions.append(Position(state, answer))
        state = state.play(guess, int(setup.matrix[setup.lists.index(guess), column]))
    return positions


def adapter_folders(adapter: Path) -> list[Path]:
    """`adapter` and each folder it is stacked on (an RL checkpoint's start): every folder export reads."""
    if not adapter.is_dir():
        raise UserError(f"--adapter {adapter}: adapter folder not found")
    folders = [adapter]
    config = read_adapter_config(adapter)
    while isinstance(config.get(STACKED_ON), str):
        below = folders[-1] / config[STACKED_ON]
        if any(os.path.realpath(below) == os.path.realpath(f) for f in folders):
            raise UserError(f"--adapter {adapter}: {folders[-1]} is stacked on itself ({STACKED_ON} loops)")
        folders.append(below)
        config = read_adapter_config(below)
    return folders


def is_export(folder: Path) -> bool:
    """Whether `folder` is an earlier export's (its record says so)."""
    try:
        return (folder / RECORD).is_file() and read_json(folder / RECORD, "export record").get("kind") == KIND
    except UserError:
        return False


def check_out(out: Path, read: list[tuple[str, Path]]) -> bool:
    """Refuse an `--out` that is or holds a folder export reads, or would replace anything but an earlier
    export (the model folder appears in one swap: what --out held goes). True: it replaces an export."""
    real = Path(os.path.realpath(out))
    for label, folder in read:
        other = Path(os.path.realpath(folder))
        if real.is_relative_to(other):
            raise UserError(f"--out {out} is inside {label}, which export reads and never writes into: "
                            "name a folder outside it")
        if other.is_relative_to(real):
            raise UserError(f"--out {out} holds {label}, which replacing --out would delete: name another folder")
    if not out.is_dir() or not any(out.iterdir()):
        return False
    if not is_export(out):
        raise UserError(f"--out {out} is not empty and is not an earlier export (it has no {RECORD}): "
                        "name a new or empty folder")
    return True


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def play_command(out: Path, user: str, max_tokens: int) -> str:
    """The mlx-lm command line that asks the exported model for its answer to `user`."""
    from llm.format import SYSTEM_PROMPT

    return shlex.join(["python", "-m", "mlx_lm", "generate", "--model", str(out), "--system-prompt", SYSTEM_PROMPT,
                       "--prompt", user, "--max-tokens", str(max_tokens), "--temp", "0"])


def prompt_format(game: list[Position], max_tokens: int) -> dict:
    """The format as a program reads it: the system message, each example position's user message and
    the solver's answer there, and where an answer ends."""
    from llm.format import messages
    from llm.generation import STOP_TEXT

    examples = []
    for position in game:
        system, user = messages(position.state)
        examples.append({"user": user["content"], "answer": position.answer})
    return {"system": system["content"], "answer_ends_at": STOP_TEXT, "max_tokens": max_tokens,
            "example_secret": EXAMPLE_SECRET, "examples": examples}


def prompt_doc(record: dict, out: Path) -> str:
    """PROMPT.md: the format for a reader, with the command that plays the opening."""
    prompt = record["prompt"]
    fence = "```"
    parts = [
        "# How to prompt this model\n",
        f"`{record['model']}` with the adapter `{record['adapter']}` fused in, written by wordle-rl's `export` "
        f"({record['dtype']}). It plays Wordle in the format it was trained on (wordle-rl's llm/format.py): a "
        "chat of one system message and one user message describing the position; it answers "
        f"`<think>short reasoning</think><guess> word</guess>`. Read the answer up to `{prompt['answer_ends_at']}` "
        f"(wordle-rl stops there; {prompt['max_tokens']} tokens hold any answer). Greedy decoding (temperature 0) "
        "gives the answers the export was checked on.\n",
        f"**Naming head.** {FOLDED_RULE if record.get('head_words') else HEAD_RULE}"
        + (f" The adapter exported here had one ({record['naming_head_left_behind']}); its play with the "
           "head is not this model's." if record["naming_head_left_behind"] else "") + "\n",
        "## System message\n", fence, prompt["system"], fence + "\n",
        f"## The positions of an example game (secret: {prompt['example_secret']}) and the solver's answers\n",
        "What the model was taught to answer at each; a user message names the answers refused at that turn, "
        "if any, on a line of its own (`Not accepted: ...`).\n",
    ]
    for number, example in enumerate(prompt["examples"], start=1):
        parts += [f"### Position {number}: user message\n", fence, example["user"], fence + "\n",
                  "Answer:\n", fence, example["answer"], fence + "\n"]
    parts += ["## Play the opening with mlx-lm\n", fence + "bash",
              play_command(out, prompt["examples"][0]["user"], prompt["max_tokens"]), fence + "\n",
              f"or `wordle-rl`: `python cli.py eval --model {out}` plays whole games.\n"]
    return "\n".join(parts)


def folders_read(model_spec: str, adapter: Path, folders: list[Path]) -> list[tuple[str, Path]]:
    """Each folder export reads, named for an error line: the adapter's, those it is stacked on, a local
    model's. The bundled start's weights are checked here too: a damaged copy is refused before any work."""
    from llm.bundled_start import FOLDER as BUNDLED_START, verified_start

    if os.path.realpath(adapter) == os.path.realpath(BUNDLED_START):
        verified_start()
    read = [(f"--adapter {adapter}", folders[0])]
    read += [(f"{folder} (the adapter {adapter} is stacked on)", folder) for folder in folders[1:]]
    if model_spec != "default" and Path(model_spec).expanduser().is_dir():
        read.append((f"--model {model_spec}", Path(model_spec).expanduser()))
    return read


def export_model(model_spec: str, adapter: Path, out: Path, dtype: str = "auto", show_progress: bool = False,
                 fold: bool = False, seed: int = 0) -> dict:
    """Fuse `adapter` into `model_spec` and write the checked model folder with its prompt format at `out`;
    the summary of what was written. `fold`: the naming head beside the adapter goes in as word tokens
    (sft/fold_head.py, its positions drawn with `seed`), after the fused model's check."""
    from mlx_lm.utils import load_tokenizer

    from common.fileio import atomic_write_json, atomic_write_text
    from common.progress import progress_bar
    from llm.format import prompt_tokens
    from llm.generation import SamplingSettings
    from llm.loading import portable_spec, resolve_dtype, resolve_model
    from llm.naming_head import head_beside
    from sft.fuse import FUSE_STAGES, write_fused

    folders = adapter_folders(adapter)
    replaces = check_out(out, folders_read(model_spec, adapter, folders))
    source = resolve_model(model_spec)
    try:
        tokenizer = load_tokenizer(source)  # for the check's prompts; write_fused loads the weights
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"cannot load the tokenizer in {source}: {' '.join(str(err).split())[:200]}") from err
    head = head_beside(adapter)
    if fold and head is None:
        raise UserError(f"--fold-head: there is no naming head beside --adapter {adapter} ({adapter}/naming_head.npz); "
                        "fit one with naming-head")

    game = example_game()
    prompts = [prompt_tokens(tokenizer, position.state) for position in game]
    max_tokens = SamplingSettings().max_tokens  # eval's: the whole of every answer is compared
    record = {
        "kind": KIND,
        "model": portable_spec(model_spec),
        "adapter": str(adapter.resolve()),
        "adapter_sha256": sha256(adapter / ADAPTER_WEIGHTS),
        "stacked_on": [str(f.resolve()) for f in folders[1:]],
        "dtype": str(resolve_dtype(dtype)).removeprefix("mlx.core."),
        "naming_head_left_behind": str(head.resolve()) if head and not fold else None,
        "prompt": prompt_format(game, max_tokens),
    }

    def beside(folder: Path, check) -> None:
        record["check"] = asdict(check)
        if fold:
            from sft.fold_head import fold_head

            record["head_words"] = fold_head(folder, head, seed, show_progress=show_progress)
        atomic_write_json(folder / RECORD, record)
        atomic_write_text(folder / PROMPT_DOC, prompt_doc(record, out))

    with progress_bar("stages", disable=not show_progress) as bar:
        task = bar.add_task("export", total=len(FUSE_STAGES))
        write_fused(model_spec, adapter, out, prompts, max_tokens, dtype, beside, lambda stage: bar.update(
            task, description=f"export: {stage}", completed=FUSE_STAGES.index(stage)))
        bar.update(task, completed=len(FUSE_STAGES))
    if head and not fold:
        note(f"the naming head {head} does not travel: the exported model plays without it "
             "(as eval --no-naming-head plays the adapter)")
    return {**record, "out": str(out), "replaced_an_export": replaces,
            "play": play_command(out, record["prompt"]["examples"][0]["user"], max_tokens)}
