"""The solver's decisions kept on disk, so a second run does not search again.

Generating SFT data spends nearly all its time on the solver's first visit to each
position; the decisions themselves are a few bytes each. They are stored per word
lists, secret list and solver settings, and per version of the solver's code: the
file name carries a digest of the modules that decide, so editing the solver never
replays stale moves.

A stored file proves itself before its decisions are used: it names the solver it was
made for and carries a checksum of its arrays (a row shifted by an edit fails it), and a
few of its decisions near the end of a game are searched again and must agree (a file
written wrong in the first place fails that). Any mismatch is a note on
stderr and an empty store: the decisions are searched again and the file rewritten.
"""

from __future__ import annotations

import hashlib
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from common.cache_files import digest
from common.errors import UserError, note
from common.fileio import atomic_write, cache_dir, check_writable_file
from solver.policy import Decision, EntropySolver

_DECIDING_MODULES = ("policy.py", "lookahead.py", "safety.py", "entropy.py", "opener.py", "state.py", "feedback.py")
SPOT_CHECKS = 3  # stored decisions made again on load: the smallest positions, so it costs milliseconds


def code_digest() -> str:
    """A short digest of the solver modules whose code decides the moves."""
    digest = hashlib.sha256()
    for name in _DECIDING_MODULES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()[:12]


def solver_key(solver: EntropySolver) -> str:
    """What a store's decisions hold for: word lists, secret list, settings and the deciding code."""
    return f"{solver.lists.fingerprint}-{solver.secret_kind}-{solver.settings.label}-{code_digest()}"


def store_path(solver: EntropySolver) -> Path:
    return cache_dir() / "decisions" / f"{solver_key(solver)}.npz"


def _checksum(key: str, arrays: dict[str, np.ndarray]) -> str:
    parts = [key]
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        parts += [f"{name} {array.dtype.str} {array.shape}", memoryview(array).cast("B")]
    return digest(*parts)


def load(solver: EntropySolver, path: Path) -> int:
    """Add the decisions stored at `path` to the solver's memo; returns how many. A missing file
    is an empty store; one that fails its proofs too, with a note (it is only a cache)."""
    if not path.is_file():
        return 0
    tables, problem = _read(solver, path)
    if problem:
        note(f"the solver's stored decisions in {path} {problem}: they are searched again and the file rewritten")
        return 0
    loaded = 0
    for table_name, table in solver.memo_tables().items():
        blob, ends, rows, costs = tables[table_name]
        starts = np.concatenate([[0], ends[:-1]])
        for start, end, row, cost in zip(starts.tolist(), ends.tolist(), rows.tolist(), costs.tolist()):
            table.setdefault(blob[start:end], Decision(row, cost))
        loaded += len(rows)
    return loaded


def _read(solver: EntropySolver, path: Path) -> tuple[dict, str | None]:
    """The tables stored at `path` ({name: (keys blob, key ends, rows, costs)}), or why they are not
    this solver's decisions."""
    try:
        with np.load(path) as stored:
            arrays = {key: stored[key] for key in stored.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        return {}, "cannot be read"
    if "checksum" not in arrays:
        return {}, "carry no checksum (an older file)"
    key, checksum = str(arrays.pop("solver", "")), str(arrays.pop("checksum"))
    if key != solver_key(solver):
        return {}, "were made for another solver"
    if checksum != _checksum(key, arrays):
        return {}, "do not match their checksum"
    tables = {}
    for table_name in solver.memo_tables():
        try:
            blob, ends = arrays[f"{table_name}_keys"].tobytes(), arrays[f"{table_name}_ends"]
            rows, costs = arrays[f"{table_name}_rows"], arrays[f"{table_name}_costs"]
        except KeyError:
            return {}, f"lack the {table_name} table"
        if not _consistent(blob, ends, rows, costs, len(solver.lists.allowed)):
            return {}, f"hold a {table_name} table that is not one"  # a wrong row would be a wrong move
        tables[table_name] = blob, ends, rows, costs
    return tables, _spot_check(solver, *tables["looked"])


def _spot_check(solver: EntropySolver, blob: bytes, ends: np.ndarray, rows: np.ndarray, costs: np.ndarray) -> str | None:
    """Why the stored quick decisions of the SPOT_CHECKS smallest positions the solver can decide
    again from their keys differ from its own (None: they agree)."""
    lengths = np.diff(ends, prepend=0)
    checked = 0
    for i in np.argsort(lengths, kind="stable").tolist():
        fresh = solver.decide_afresh(blob[int(ends[i] - lengths[i]):int(ends[i])])
        if fresh is None:
            continue
        if fresh.row != int(rows[i]):
            return (f"disagree with the solver ({solver.lists.allowed[int(rows[i])]} stored where it plays "
                    f"{solver.lists.allowed[fresh.row]})")
        checked += 1
        if checked == SPOT_CHECKS:
            break
    return None


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
    """Write every memoised decision to `path` atomically, with the solver it holds for and a checksum."""
    arrays = {}
    for table_name, table in solver.memo_tables().items():
        keys = list(table)
        arrays[f"{table_name}_keys"] = np.frombuffer(b"".join(keys), dtype=np.uint8)
        arrays[f"{table_name}_ends"] = np.cumsum([len(k) for k in keys], dtype=np.int64)
        arrays[f"{table_name}_rows"] = np.array([d.row for d in table.values()], dtype=np.int64)
        arrays[f"{table_name}_costs"] = np.array([d.cost for d in table.values()], dtype=np.float64)
    key = solver_key(solver)
    proof = {"solver": np.array(key), "checksum": np.array(_checksum(key, arrays))}

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays, **proof)

    atomic_write(path, write)


@contextmanager
def remembered(solver: EntropySolver) -> Iterator[int]:
    """Run with the stored decisions loaded (yields how many), and store the grown memo after. A
    store that could not be written (a folder in its place, no permission) is refused before the
    solver's work, which its write would otherwise lose at the end."""
    path = store_path(solver)
    try:
        check_writable_file(path)
    except UserError as err:
        raise UserError(f"the solver's decisions cannot be stored: {err}; remove what is in the way, set "
                        "WORDLE_RL_CACHE to another folder, or pass --cold") from None
    before = load(solver, path)
    yield before
    if sum(len(table) for table in solver.memo_tables().values()) > before:
        save(solver, path)
