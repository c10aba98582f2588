"""Shared fixtures: an isolated cache, the shipped lists, and a small pair of lists."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("WORDLE_RL_NO_BLAS_FIX", "1")


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every cache the code writes goes to a temp folder, never the user's."""
    path = tmp_path_factory.mktemp("cache")
    os.environ["WORDLE_RL_CACHE"] = str(path)
    return path


@pytest.fixture(scope="session")
def small_lists_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """300 answers and 1,500 allowed words (answers included) from the real lists."""
    from solver.words import default_word_lists

    lists = default_word_lists()
    answers = list(lists.answers[::7])[:300]
    allowed = sorted(set(answers) | set(lists.allowed[::9][:1200]))
    folder = tmp_path_factory.mktemp("lists")
    (folder / "answers.txt").write_text("\n".join(answers) + "\n")
    (folder / "allowed.txt").write_text("\n".join(allowed) + "\n")
    return folder / "answers.txt", folder / "allowed.txt"
