"""The default model's SFT start, shipped with the project (llm/sft_start/).

SFT from scratch takes 2,400 steps of 16 (464 s on an H100; many hours on a 2-core CPU), so a
CPU's main job starts RL from the GPU recipe's SFT adapter instead: the LoRA weights of that
stage alone (no head, no RL), stored in float16 to stay under 10 MB (the largest change from
the float32 original is 6e-5 on weights up to 0.16). The sha256 of its weights and of its config
is checked on every use, before the pipeline copies it into a run, so a truncated or altered file
is one clear error naming it instead of a model that plays as something else.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from common.errors import UserError
from llm.adapter_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS

FOLDER = Path(__file__).parent / "sft_start"
# Of both files: a config changed (its LoRA scale 20 -> 200) played as another model, silently.
SHA256 = {ADAPTER_WEIGHTS: "fc66fad110a9b76387eaabd6a8a3e44cbc657913880b88ce98095f66ba73db8b",
          ADAPTER_CONFIG: "56aab2ad4a809eb071b37bbedbc833ed5947caa367fb0756e6c512175fa08ea2"}


def verified_start(folder: Path = FOLDER, sha256: dict[str, str] = SHA256) -> Path:
    """`folder` once each file's digest is the recorded one; else a one-line `UserError` naming the file."""
    if not all((folder / name).is_file() for name in sha256):
        raise UserError(f"the bundled SFT start is missing: {folder} has no {ADAPTER_WEIGHTS} or {ADAPTER_CONFIG}; "
                        "reinstall the project (pip install -e .)")
    for name, expected in sha256.items():
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        if digest != expected:
            raise UserError(f"the bundled SFT start {folder / name} is damaged or changed (sha256 {digest[:12]}, "
                            f"expected {expected[:12]}); restore it (git checkout -- llm/sft_start) or reinstall "
                            "the project")
    return folder


def copy_start(dest: Path, folder: Path = FOLDER, sha256: dict[str, str] = SHA256) -> Path:
    """A verified copy of the start's adapter at `dest` (an adapter folder a command may write beside)."""
    source = verified_start(folder, sha256)
    dest.mkdir(parents=True, exist_ok=True)
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        shutil.copy2(source / name, dest / name)
    return dest
