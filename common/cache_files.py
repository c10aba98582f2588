"""Cache files that prove what they hold: a digest of their inputs and of their contents.

A cache is only worth trusting if a damaged or foreign file is noticed: an empty
pattern matrix, one of the wrong dtype, or one of the right shape holding other
numbers (then `eval` loses games and `solve` blames the user's tiles), a truncated
model. Each cache written here carries the digest of what it was made from and of
its bytes; a reader checks both and treats any mismatch as a miss, so the cache is
rebuilt instead of used.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import zipfile
import zlib
from pathlib import Path

import numpy as np

from common.fileio import atomic_write, atomic_write_json

MANIFEST = "wordle-rl-cache.json"
_CHUNK = 1 << 24


def digest(*parts: str | bytes | memoryview) -> str:
    """sha256 of the parts in order, as hex."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def clear_foreign(path: Path) -> None:
    """A folder where a cache file belongs (ours to manage: it sits in the cache) is removed."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)


# -- one array -------------------------------------------------------------------------
# An .npz file is a zip: reading a member checks its bytes against the CRC-32 the zip stores
# for it. The digest saved beside the array binds that CRC to the inputs, so a flipped byte
# fails the zip's check, and another array (a valid zip) fails the digest, for the price of
# reading the file: hashing the allowed-list matrix (168 MB) would add about 0.25 s a load.

def _array_digest(inputs: str, crc: int) -> str:
    return digest(inputs, f"crc32 {crc}")


def save_array(path: str | os.PathLike, array: np.ndarray, inputs: str) -> None:
    """Write `array` with the digest of `inputs` and of its bytes (an .npz file, atomically)."""
    path = Path(path)
    clear_foreign(path)
    array = np.ascontiguousarray(array)
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    check = np.array(_array_digest(inputs, zlib.crc32(buffer.getbuffer())))

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            np.savez(handle, array=array, digest=check)

    atomic_write(path, write)


def load_array(path: str | os.PathLike, inputs: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    """The array saved at `path` for `inputs`, or None when it is missing, damaged or not that array."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            array, check = stored["array"], str(stored["digest"])  # the zip checks each CRC as it reads
            crc = stored.zip.getinfo("array.npy").CRC
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, AttributeError):
        return None  # not an .npz (an old .npy, garbage, empty), a bad CRC, or without our keys
    if array.shape != shape or array.dtype != dtype:
        return None
    return array if check == _array_digest(inputs, crc) else None


# -- a folder of files -----------------------------------------------------------------------

def file_digest(path: Path) -> str:
    """sha256 of the file's bytes, as hex, read in chunks (a model's weights are hundreds of MB)."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: Path, inputs: dict) -> None:
    """Record `inputs` and every file's size and sha256 in `folder`/MANIFEST (the last file written)."""
    files = {p.name: {"bytes": p.stat().st_size, "sha256": file_digest(p)}
             for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}
    atomic_write_json(folder / MANIFEST, {"inputs": inputs, "files": files})


def manifest_problem(folder: Path, inputs: dict, contents: bool = False) -> str | None:
    """Why `folder` is not the cache `inputs` make (None: it is). Sizes are always checked (a
    truncated file is caught at once); with `contents`, every file's sha256 too (seconds for a model)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        recorded_inputs = manifest["inputs"]
    except FileNotFoundError:
        return f"no {MANIFEST}"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{MANIFEST} is damaged"
    if recorded_inputs != inputs:
        return "made from other inputs"
    if not isinstance(files, dict) or not files:
        return f"{MANIFEST} lists no files"
    for name, expected in files.items():
        path = folder / name
        try:
            size = path.stat().st_size if path.is_file() else None
            if size is None:
                return f"{name} is missing"
            if size != expected["bytes"]:
                return f"{name} has {size:,} bytes, not {expected['bytes']:,}"
            if contents and file_digest(path) != expected["sha256"]:
                return f"{name} does not hold what was written"
        except (OSError, KeyError, TypeError):
            return f"{name} cannot be checked"
    return None


# -- entries of a JSON file ----------------------------------------------------------------

def _entries(path: Path) -> dict:
    clear_foreign(path)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def load_entry(path: str | os.PathLike, key: str):
    """The value stored under `key`, or None when it is missing or fails its digest."""
    entry = _entries(Path(path)).get(key)
    if not isinstance(entry, dict) or "value" not in entry:
        return None
    value = entry["value"]
    return value if entry.get("digest") == digest(key, json.dumps(value)) else None


def save_entry(path: str | os.PathLike, key: str, value) -> None:
    """Store `value` under `key` with its digest, keeping the file's other entries."""
    entries = _entries(Path(path))
    entries[key] = {"value": value, "digest": digest(key, json.dumps(value))}
    atomic_write_json(path, entries)
