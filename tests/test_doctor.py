"""`doctor` and the MKL preload it reports on."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli
from llm.blas import find_mkl
from llm.commands import doctor

REPO = Path(__file__).resolve().parent.parent
FIELDS = {
    "platform",
    "machine",
    "python",
    "mlx",
    "device",
    "blas",
    "blas_hint",
    "matmul_fp32_1024_gflops",
    "default_model_cached",
    "default_model_path",
    "default_model_problem",
}
needs_mkl = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64" or find_mkl() is None,
    reason="the MKL preload only applies on Linux x86_64 with the mkl package",
)


def test_doctor_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORDLE_RL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "doctor.json"
    result = CliRunner().invoke(doctor, ["--json", str(out)])
    assert result.exit_code == 0, result.output
    info = json.loads(out.read_text())
    assert set(info) == FIELDS
    assert info["matmul_fp32_1024_gflops"] > 0
    assert info["python"] == platform.python_version()
    assert info["device"] in ("cpu", "gpu")
    assert info["default_model_cached"] is False and info["default_model_problem"] == "not converted yet"
    assert info["default_model_path"] == str(
        tmp_path / "cache" / "models" / "smollm2-135m-instruct-f32"
    )
    assert "matmul_fp32_1024_gflops" in result.output and info["blas"] in result.output


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without any BLAS choice already made (conftest opts out for pytest)."""
    chosen = ("LD_PRELOAD", "WORDLE_RL_BLAS_REEXEC", "WORDLE_RL_NO_BLAS_FIX")
    return {**{k: v for k, v in os.environ.items() if k not in chosen}, **extra}


def _probe(tmp_path: Path, env: dict[str, str]) -> dict:
    """Run a program that calls ensure_fast_blas() first, as cli.py does; report what it got."""
    script = tmp_path / "probe.py"
    script.write_text(
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from llm.blas import ensure_fast_blas, blas_in_use\n"
        "ensure_fast_blas()\n"
        "import json, os\n"
        "from llm.blas import blas_threads, set_blas_threads\n"
        "from llm.doctor import matmul_gflops\n"
        "gflops = matmul_gflops(512, 3)\n"
        "threads = blas_threads(); set_blas_threads(1); one = blas_threads()\n"
        "print(json.dumps({'blas': blas_in_use(), 'argv': sys.argv[1:], 'threads': [threads, one],\n"
        "    'gflops': gflops, 'preload': os.environ.get('LD_PRELOAD', '')}))\n"
    )
    args = [sys.executable, str(script), "--flag", "two words"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@needs_mkl
def test_preload_switches_mlx_to_mkl(tmp_path: Path) -> None:
    fast = _probe(tmp_path, _clean_env())
    slow = _probe(tmp_path, _clean_env(WORDLE_RL_NO_BLAS_FIX="1"))
    assert fast["blas"] == "mkl" and fast["preload"] == str(find_mkl())
    assert fast["argv"] == slow["argv"] == ["--flag", "two words"]  # the re-exec keeps argv
    assert slow["blas"] == "reference (bundled with mlx)" and slow["preload"] == ""
    assert fast["gflops"] > 5 * slow["gflops"]
    assert fast["threads"][0] >= 1 and fast["threads"][1] == 1  # MKL's threads can change between passes
    assert slow["threads"] == [None, None]


@needs_mkl
def test_no_reexec_when_argv_cannot_restart_the_program(tmp_path: Path) -> None:
    """`python -c` code can't be re-run from argv, so it keeps the BLAS it started with."""
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from llm.blas import ensure_fast_blas, blas_in_use\n"
        "ensure_fast_blas(); print(blas_in_use())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "reference (bundled with mlx)"


def test_doctor_json_unwritable_is_a_user_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(cli, ["doctor", "--json", str(blocker / "doctor.json")])
    assert result.exit_code == 2  # refused before the matmul benchmark runs
    assert result.stderr.strip() == (f"error: Invalid value for '--json': cannot write {blocker / 'doctor.json'}: "
                                     f"{blocker} is not a folder")
