"""Atomic writes and the cache directory.

Every file the project writes goes through a temp file in the same folder and an
`os.replace`, so a crash or a kill -9 leaves either the old file or the new one,
never half of one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

# What a killed `atomic_write` / `atomic_replace_dir` leaves: `.NAME.<8 random>.tmp` files,
# `.NAME.<8 random>` folders (tempfile's names) and `.NAME.old` folders.
LEFTOVER = re.compile(r"^\.(?P<name>.+?)\.(?:(?P<file>[a-z0-9_]{8}\.tmp)|[a-z0-9_]{8}|old)$")


def cache_dir() -> Path:
    """Where matrices, openers and the converted default model live.

    `WORDLE_RL_CACHE` overrides the default `~/.cache/wordle-rl` (tests point it at a
    temp folder).
    """
    root = os.environ.get("WORDLE_RL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "wordle-rl"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call `write(tmp_path)` and move the result onto `path` in one step."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    atomic_write(path, write)


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def atomic_replace_dir(final: str | os.PathLike, build: Callable[[Path], None]) -> None:
    """Build a directory in a temp sibling, then swap it in place of `final`.

    A reader never sees a half-built directory: either the previous one or the new one.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; the result should look like any new folder
    try:
        build(tmp)
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_leftovers(folder: str | os.PathLike) -> list[str]:
    """Clear what killed atomic writes left in `folder`; returns the names removed.

    A `.NAME.old` folder whose NAME is missing (the kill came between
    `atomic_replace_dir`'s two renames) is put back as NAME: the last complete version.
    Only a process that owns the folder may call this (solver/run_lock.py): another
    one's temp files in the middle of a write look the same.
    """
    folder = Path(folder)
    removed = []
    for path in sorted(folder.iterdir()):
        match = LEFTOVER.match(path.name)
        if match is None or path.is_symlink() or path.is_dir() == bool(match["file"]):
            continue  # only the kind of entry our writes make: a file for .tmp, a folder otherwise
        final = folder / match["name"]
        if path.name.endswith(".old") and path.is_dir() and not final.exists():
            os.replace(path, final)
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        removed.append(path.name)
    return removed
