"""Reading and writing files the careful way, and the cache directory.

Every file the project writes goes through a temp file in the same folder and an
`os.replace`, so a crash or a kill -9 leaves either the old file or the new one,
never half of one. A path that is a device or a FIFO (`--json /dev/null`) is written
through, and a symlink's target is replaced, never the node the user named. New files
follow the user's umask, a replaced file keeps its mode.

Every file the project reads that a user can hand it (configs, data, eval JSON, run
folders) goes through `read_text` / `read_json`, and every write failure (no
permission, read-only or full disk) ends as a one-line `UserError`, not a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable

from common.errors import UserError

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
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create the cache folder {path}: {os_reason(err)} "
                        "(set WORDLE_RL_CACHE to a writable folder)") from err
    return path


def os_reason(err: OSError) -> str:
    """'Permission denied' (plus the file it concerns when that is not obvious) for an error line."""
    reason = err.strerror or str(err)
    return f"{reason}: {err.filename}" if err.filename else reason


# -- reading -------------------------------------------------------------------------

def read_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of `path` without a leading byte-order mark (Windows editors write one);
    a one-line UserError naming `what` it is when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise UserError(f"{what} {path} is not UTF-8 text (a binary file?)") from None
    except OSError as err:
        raise UserError(f"cannot read {what} {path}: {err.strerror or err}") from err


_JSON_NAMES = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
               bool: "true/false", type(None): "null"}


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """An object's pairs as a dict; a key given twice is a mistake (json would keep the last silently)."""
    data = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(key)
        data[key] = value
    return data


def parse_json(text: str, where: str, kind: type | None = dict) -> Any:
    """`text` as JSON of type `kind` (None: any); a one-line UserError saying where it went wrong."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise UserError(f"{where}: not valid JSON ({err.msg} at line {err.lineno})") from None
    except _DuplicateKey as err:
        raise UserError(f'{where}: the key "{err}" is given twice; keep one') from None
    except RecursionError:
        raise UserError(f"{where}: nested too deeply to be ours") from None
    if kind is not None and not isinstance(data, kind):
        raise UserError(f"{where}: expected {_JSON_NAMES.get(kind, kind.__name__)}, "
                        f"got {_JSON_NAMES.get(type(data), type(data).__name__)}")
    return data


def is_number(value, integer: bool = False) -> bool:
    """A JSON number (true/false are not), a whole one if `integer`."""
    return isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)


def read_json(path: str | os.PathLike, what: str, kind: type | None = dict) -> Any:
    """The JSON in `path` (an object by default), checked as `parse_json` does."""
    return parse_json(read_text(path, what), f"{what} {path}", kind)


def read_jsonl(path: str | os.PathLike, what: str) -> list[tuple[int, str]]:
    """(line number, line) of every non-blank line of a JSON-lines file."""
    return [(number, line) for number, line in enumerate(read_text(path, what).split("\n"), start=1)
            if line.strip()]


def read_arrays(path: str | os.PathLike, what: str, fix: str = "") -> dict:
    """Every array of the .npz file at `path`, read whole (the zip checks each one's CRC); anything
    that is not such a file (cut short, garbage, a single .npy array, pickled objects) is a one-line
    UserError saying `path` is not `what`, and then `fix`, what to do about it."""
    import zipfile
    import zlib

    import numpy as np

    try:
        saved = np.load(path, allow_pickle=False)
        if not isinstance(saved, np.lib.npyio.NpzFile):
            raise ValueError("one array, not an .npz archive of them")
        with saved:
            return {key: saved[key] for key in saved.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise UserError(f"{path} is not {what} ({type(err).__name__}: {' '.join(str(err).split())[:80]})"
                        + (f"; {fix}" if fix else "")) from err


# -- writing -------------------------------------------------------------------------

def _umask() -> int:
    """The process's umask, read without changing it where Linux allows (setting it, even for an
    instant, would give files another thread creates meanwhile the wrong mode)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _is_special(path: Path) -> bool:
    """A device, FIFO or socket: written through, never replaced by a file of ours."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _new_file_mode(path: Path) -> int:
    """The mode the replaced file had, or what `open` would give a new one under the umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


FULL_BELOW = 1 << 20  # bytes free under which a failed write is put down to a full disk


def _full_disk(folder: Path) -> bool:
    """Nearly no space left where `folder` is: libraries that write files themselves (mlx's
    safetensors writer) fail with a RuntimeError there, not an OSError saying so."""
    try:
        info = os.statvfs(_nearest_existing(folder))
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < FULL_BELOW


def _write_error(path: str | os.PathLike, err: BaseException) -> UserError | None:
    """The one-line error for a write to `path` that failed with `err` (None: a bug, keep its traceback)."""
    if isinstance(err, OSError) and err.filename and LEFTOVER.match(Path(err.filename).name):
        # our temp file beside `path` (atomic_write): its name means nothing to the user
        return UserError(f"cannot write {path}: no file can be made in {Path(err.filename).parent} "
                         f"({err.strerror or err})")
    if isinstance(err, OSError):
        return UserError(f"cannot write {path}: {os_reason(err)}")
    if isinstance(err, Exception) and _full_disk(Path(path).parent):
        return UserError(f"cannot write {path}: no space left on the device")
    return None


def write_target(path: str | os.PathLike) -> Path:
    """The node a write to `path` lands on: a symlink's target, else `path` itself."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call `write(tmp_path)` and move the result onto `path` in one step.

    A device or FIFO is handed to `write` itself; any OSError is a one-line UserError.
    """
    target = write_target(path)
    try:
        if _is_special(target):
            write(str(target))
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        try:
            os.chmod(tmp, _new_file_mode(target))  # mkstemp makes 0600
            write(tmp)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except Exception as err:
        error = _write_error(path, err)
        if error is None:
            raise
        raise error from err


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if not _is_special(Path(tmp)):
                os.fsync(f.fileno())

    atomic_write(path, write)


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append one line (a log record); a full disk is a one-line UserError."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError as err:
        raise UserError(f"cannot write {path}: {os_reason(err)}") from err


def atomic_replace_dir(final: str | os.PathLike, build: Callable[[Path], None]) -> None:
    """Build a directory in a temp sibling, then swap it in place of `final`.

    A reader never sees a half-built directory: either the previous one or the new one.
    """
    final = Path(os.path.abspath(final))  # "." has no name to build a sibling from
    tmp = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the result should look like any new folder
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
    except BaseException as err:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        error = _write_error(final, err)
        if error is None:
            raise
        raise error from err


# -- checking outputs before any work ------------------------------------------------------

def _nearest_existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _unwritable_reason(folder: Path) -> str | None:
    """Why files cannot be made in `folder` (None: they can)."""
    if not folder.is_dir():
        return f"{folder} is not a folder"
    if os.access(folder, os.W_OK | os.X_OK):
        return None
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return f"{folder} is on a read-only file system" if read_only else f"no permission to write in {folder}"


def check_writable_file(path: str | os.PathLike) -> None:
    """Refuse, before any work, a file path that cannot be written (a folder, no permission,
    a read-only file system): the run's result would be lost at its end."""
    target = write_target(path)
    if target.is_dir():
        raise UserError(f"{path} is a folder, not a file")
    if _is_special(target):
        if not os.access(target, os.W_OK):
            raise UserError(f"cannot write {path}: no permission")
        return
    reason = _unwritable_reason(_nearest_existing(target.parent))
    if reason:
        raise UserError(f"cannot write {path}: {reason}")


def check_writable_folder(path: str | os.PathLike, replaced: bool = False) -> None:
    """Refuse, before any work, an output folder that cannot be made or written in; one
    that is `replaced` whole (built aside, then swapped in) needs its parent writable too."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{path} is a file, not a folder")
    reason = _unwritable_reason(_nearest_existing(path))
    if reason is None and replaced and path.exists():
        reason = _unwritable_reason(Path(os.path.abspath(path)).parent)
    if reason:
        raise UserError(f"cannot write {path}: {reason}")


def remove_leftovers(folder: str | os.PathLike) -> list[str]:
    """Clear what killed atomic writes left in `folder`; returns the names removed.

    A `.NAME.old` folder whose NAME is missing (the kill came between
    `atomic_replace_dir`'s two renames) is put back as NAME: the last complete version.
    Only a process that owns the folder may call this (common/run_lock.py): another
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
