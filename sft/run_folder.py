"""What an --out folder holds, and the one rule for running a command on it again.

`gen-sft`, `sft`, `rl`, `pipeline` and `distill` each write their own kind of folder
(common/run_kinds.py, where no output file of any command may land either). A command
takes an empty folder or one of its own kind; any other (`sft --out DATA_DIR`, or
`gen-sft --overwrite` on an SFT run) is refused before anything is written there: a run
mixed into a dataset, or a dataset swapped in over a run, cannot be undone.

The resume rule, one for `sft`, `rl` and `pipeline`: the same command again continues the
run in --out from its last checkpoint, and a run that never reached one starts again.
Flags that cannot change mid-run are compared with the run's own record: identical
values are fine, a changed one is an error naming its flag. `--resume` says the same
explicitly (an error where there is nothing to continue), and the flags it leaves out
are the run's own.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.errors import UserError, note
from common.fileio import LEFTOVER
from common.run_kinds import OUTPUTS, kinds_marked
from common.run_lock import LOCK_FILE


def entries(folder: Path) -> set[str]:
    """The names in `folder` that hold something: not its lock, not what killed writes left."""
    return {p.name for p in folder.iterdir() if p.name != LOCK_FILE and not LEFTOVER.match(p.name)}


def claim(folder: Path, kind: str) -> None:
    """Refuse `folder` for `kind`'s output unless it is empty (a lock and what killed writes
    left do not count) or already holds `kind`'s output."""
    if not folder.is_dir():
        return
    marked = kinds_marked(folder, entries(folder))
    others = [other for other in OUTPUTS if other != kind and other in marked]
    strangers = [] if kind in marked else sorted(entries(folder) - OUTPUTS[kind].names)
    if not others and not strangers:
        return
    held = OUTPUTS[others[0]].label if others else f"other files ({', '.join(strangers[:3])})"
    raise UserError(f"--out {folder} holds {held}, not {OUTPUTS[kind].label}: choose another --out")


def own_entries(folder: Path, kind: str) -> frozenset[str]:
    """The one rule for what `kind` may delete in `folder`: the entries its own manifest lists
    (gen-sft's manifest.json `files`), else the names its kind writes (a manifest older than
    that list: gen-sft always wrote those five)."""
    output = OUTPUTS[kind]
    try:
        listed = json.loads((folder / output.marker).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        listed = None
    if isinstance(listed, list) and all(isinstance(name, str) for name in listed):
        return frozenset(listed) & output.names
    return output.names


def refuse_foreign(folder: Path, kind: str) -> None:
    """Before `kind` replaces `folder` whole: refuse it while it holds anything `kind` did not write
    (a user's file, an SFT run made inside a dataset), naming it and what to do."""
    foreign = sorted(entries(folder) - own_entries(folder, kind)) if folder.is_dir() else []
    if foreign:
        raise UserError(f"--out {folder} holds {', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}, "
                        f"which {kind} did not write; it replaces only {OUTPUTS[kind].label} of its own: move "
                        "them out of the folder, or choose another --out")


def continues(out: Path, resume: bool) -> bool:
    """Whether the command continues the run in `out`: asked to (`--resume`), or it has a checkpoint."""
    from sft.checkpoint import latest_checkpoint

    return resume or latest_checkpoint(out) is not None


def refuse_changes(out: Path, label: str, changed: list[str], may_change: str) -> None:
    """The one error for flags that differ from the run's record, naming each."""
    if changed:
        raise UserError(f"{out} holds {label} that continues as it started: {may_change} (got {', '.join(changed)}); "
                        "choose another --out for a new run")


def note_starts_again(out: Path) -> None:
    note(f"{out} has no checkpoint yet; its run starts again from step 0")


def note_if_begun(out: Path) -> None:
    """A new run in `out` where one began (its run.json) and never reached a checkpoint: say that
    it starts again, as the resume rule promises."""
    if (out / "run.json").is_file():
        note_starts_again(out)
