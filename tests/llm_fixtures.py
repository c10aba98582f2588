"""Shared pytest fixtures for tests that need a model.

Use in a test module with `from llm_fixtures import tiny_model_dir  # noqa: F401`
(pytest puts tests/ on sys.path), then take `tiny_model_dir` as an argument.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tiny_model import cached_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama folder (2 layers, hidden 64, ~400-token BPE), built once per session."""
    return cached_tiny_model(tmp_path_factory.getbasetemp() / "models")


def run_benchmark(command, model_dir: Path, args: list[str], out: Path) -> dict:
    """Run a benchmark's click command on a model folder with `--json out`; the report it wrote."""
    result = CliRunner().invoke(command, ["--model", str(model_dir), *args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())
