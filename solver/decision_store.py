"""The solver's decisions kept on disk, so a second run does not search again.

Generating SFT data spends nearly all its time on the solver's first visit to each
position; the decisions themselves are a few bytes each. They are stored per word
lists, secret list and solver settings, and per version of the solver's code: the
file name carries a digest of the modules that decide, so editing the solver never
replays stale moves.
"""

from __future__ import annotations

import hashlib
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from solver.fileio import atomic_write, cache_dir
from solver.policy import Decision, EntropySolver

_DECIDING_MODULES = ("policy.py", "lookahead.py", "safety.py", "entropy.py", "opener.py", "state.py", "feedback.py")
_TABLES = ("played", "looked")


def code_digest() -> str:
    """A short digest of the solver modules whose code decides the moves."""
    digest = hashlib.sha256()
    for name in _DECIDING_MODULES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()[:12]


def store_path(solver: EntropySolver) -> Path:
    name = f"{solver.lists.fingerprint}-{solver.secret_kind}-{solver.settings.label}-{code_digest()}.npz"
    return cache_dir() / "decisions" / name


def load(solver: EntropySolver, path: Path) -> int:
    """Add the decisions stored at `path` to the solver's memo; returns how many. A missing
    or unreadable file is an empty store (it is only a cache), never an error."""
    try:
        with np.load(path) as stored:
            arrays = {key: stored[key] for key in stored.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        return 0
    tables = {}
    for table_name in solver.memo_tables():
        try:
            blob, ends = arrays[f"{table_name}_keys"].tobytes(), arrays[f"{table_name}_ends"]
            rows, costs = arrays[f"{table_name}_rows"], arrays[f"{table_name}_costs"]
        except KeyError:
            return 0
        if not _consistent(blob, ends, rows, costs, len(solver.lists.allowed)):
            return 0  # another program's file, or edited: a wrong row would be a wrong move
        tables[table_name] = blob, ends, rows, costs
    loaded = 0
    for table_name, table in solver.memo_tables().items():
        blob, ends, rows, costs = tables[table_name]
        starts = np.concatenate([[0], ends[:-1]])
        for start, end, row, cost in zip(starts.tolist(), ends.tolist(), rows.tolist(), costs.tolist()):
            table.setdefault(blob[start:end], Decision(row, cost))
        loaded += len(rows)
    return loaded


def _consistent(blob: bytes, ends: np.ndarray, rows: np.ndarray, costs: np.ndarray, guesses: int) -> bool:
    """The arrays of one table describe decisions: keys that tile the blob, guesses that exist."""
    if not (ends.ndim == rows.ndim == costs.ndim == 1 and len(ends) == len(rows) == len(costs)):
        return False
    if not (np.issubdtype(ends.dtype, np.integer) and np.issubdtype(rows.dtype, np.integer)):
        return False
    if len(ends) and (ends[0] < 0 or np.any(np.diff(ends) < 0) or ends[-1] != len(blob)):
        return False
    return bool(np.all((rows >= 0) & (rows < guesses)))


def save(solver: EntropySolver, path: Path) -> None:
    """Write every memoised decision to `path` atomically."""
    arrays = {}
    for table_name, table in solver.memo_tables().items():
        keys = list(table)
        arrays[f"{table_name}_keys"] = np.frombuffer(b"".join(keys), dtype=np.uint8)
        arrays[f"{table_name}_ends"] = np.cumsum([len(k) for k in keys], dtype=np.int64)
        arrays[f"{table_name}_rows"] = np.array([d.row for d in table.values()], dtype=np.int64)
        arrays[f"{table_name}_costs"] = np.array([d.cost for d in table.values()], dtype=np.float64)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)

    atomic_write(path, write)


@contextmanager
def remembered(solver: EntropySolver) -> Iterator[int]:
    """Run with the stored decisions loaded (yields how many), and store the grown memo after."""
    path = store_path(solver)
    before = load(solver, path)
    yield before
    if sum(len(table) for table in solver.memo_tables().values()) > before:
        save(solver, path)
