"""One run per folder, with a lock that a killed run cannot leave stuck.

`gen-sft`, `sft`, `rl` and `pipeline` hold an exclusive `flock` on RUN/.lock while they work
on RUN, so a second run given the same `--out` stops with one error line instead of
logging every step twice; `naming-head` holds its `--adapter`'s, so that two fits on one
adapter cannot leave it the head of whichever ended last. The operating system drops a
flock when its process ends, however it ends (kill -9 included): the lock file left
behind never blocks a resume.
A folder the run created and left holding nothing but the lock (it stopped on an
error before writing anything) is removed again, and so is a lock file it created in a
folder it stopped on (one holding another command's output, say). Holding the lock, the run owns the
folder: what a killed run's atomic writes left there (temp files and folders) is
cleared as the lock is taken.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from common.errors import UserError
from common.fileio import remove_leftovers

LOCK_FILE = ".lock"


@contextmanager
def run_lock(folder: str | os.PathLike, flag: str = "--out") -> Iterator[Path]:
    """Hold RUN/.lock for the block (creating RUN if needed) and clear leftovers; UserError if another run
    holds it. `flag` is the one that named the folder, for the messages."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{flag} {folder} is a file, not a folder")
    created = not folder.exists()
    fresh = not (folder / LOCK_FILE).exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / LOCK_FILE, "a+", encoding="utf-8")
    except OSError as err:
        raise UserError(f"cannot write to {folder}: {err.strerror or err}") from err
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            raise UserError(f"{folder} is in use by another run{f' (pid {holder})' if holder.isdigit() else ''}; "
                            f"wait for it to end or choose another {flag}") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            remove_leftovers(folder)
            yield folder
        except BaseException:
            if fresh:  # the run stopped on an error: a folder that is not its own keeps no lock file of it
                (folder / LOCK_FILE).unlink(missing_ok=True)
            raise
        finally:
            if created and [p.name for p in folder.iterdir()] in ([], [LOCK_FILE]):
                (folder / LOCK_FILE).unlink(missing_ok=True)
                folder.rmdir()
