"""Caches that check what they hold: a damaged or foreign pattern matrix, opener or model cache is
rebuilt, never used (a matrix of the right shape with other numbers used to lose games silently)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli import cli
from llm_fixtures import tiny_model_dir  # noqa: F401
from common.cache_files import MANIFEST, load_array, manifest_problem, save_array, write_manifest
from solver.matrix import build_pattern_matrix, matrix_path, pattern_matrix
from solver.words import load_word_lists


@pytest.fixture()
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORDLE_RL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture()
def small_lists(small_lists_files):
    return load_word_lists(*small_lists_files)


def right_matrix(lists):
    return build_pattern_matrix(lists.allowed_codes, lists.answer_codes)


def _empty(path):
    path.write_bytes(b"")


def _npy_of_zeros(path):
    zeros = np.zeros_like(np.load(path)["array"])  # the right shape and dtype, other numbers, no digest
    with open(path, "wb") as handle:
        np.save(handle, zeros)


def _wrong_dtype(path):
    with np.load(path) as stored:
        array, check = stored["array"].astype(np.int16), stored["digest"]
    with open(path, "wb") as handle:
        np.savez(handle, array=array, digest=check)


def _one_number_changed(path):
    with np.load(path) as stored:
        array, check = stored["array"].copy(), stored["digest"]
    array[3, 5] = (array[3, 5] + 1) % 243
    with open(path, "wb") as handle:
        np.savez(handle, array=array, digest=check)


def _a_byte_flipped(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the array's bytes: the zip's CRC-32 no longer matches
    path.write_bytes(bytes(data))


def _a_folder(path):
    path.unlink()
    (path / "inside").mkdir(parents=True)


@pytest.mark.parametrize("damage", [_empty, _npy_of_zeros, _wrong_dtype, _one_number_changed, _a_byte_flipped,
                                    _a_folder])
def test_a_damaged_matrix_cache_is_rebuilt(own_cache, small_lists, damage):
    first = pattern_matrix(small_lists, "answers")
    path = Path(matrix_path(small_lists, "answers"))
    damage(path)
    again = pattern_matrix(small_lists, "answers")
    assert np.array_equal(again, right_matrix(small_lists)) and np.array_equal(again, first)
    assert path.is_file() and np.array_equal(np.load(path)["array"], first)  # the repaired file is written


def test_matrix_cache_of_other_lists_is_not_used(tmp_path):
    matrix = np.arange(12, dtype=np.uint8).reshape(3, 4)
    save_array(tmp_path / "m.npz", matrix, "lists A")
    assert np.array_equal(load_array(tmp_path / "m.npz", "lists A", (3, 4), np.dtype(np.uint8)), matrix)
    assert load_array(tmp_path / "m.npz", "lists B", (3, 4), np.dtype(np.uint8)) is None
    assert load_array(tmp_path / "m.npz", "lists A", (4, 3), np.dtype(np.uint8)) is None


def test_eval_after_a_wrong_matrix_cache_still_wins(own_cache, small_lists_files, small_lists):
    pattern_matrix(small_lists, "answers")
    _npy_of_zeros(Path(matrix_path(small_lists, "answers")))
    answers, allowed = small_lists_files
    result = CliRunner().invoke(cli, ["eval", "--answers", str(answers), "--allowed", str(allowed), "--games", "40",
                                      "--quiet", "--json", str(own_cache.parent / "eval.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((own_cache.parent / "eval.json").read_text())["wins"] == 40


@pytest.mark.parametrize("content", [b"", b"\x00\xff" * 8, b"[1, 2]", b'{"k": "salet"}'])
def test_a_damaged_openers_cache_is_recomputed(own_cache, small_lists, content):
    from solver.policy import EntropySolver
    from solver.setup import Setup

    setup = Setup(small_lists, pattern_matrix(small_lists, "answers"), "answers")
    first = EntropySolver(setup.start).opener()
    path = own_cache / "openers.json"
    stored = json.loads(path.read_text())
    path.write_bytes(content)
    assert EntropySolver(setup.start).opener() == first
    assert json.loads(path.read_text()).items() >= stored.items()  # our entry restored, others kept


def test_an_edited_opener_is_recomputed(own_cache, small_lists):
    from solver.policy import EntropySolver
    from solver.setup import Setup

    setup = Setup(small_lists, pattern_matrix(small_lists, "answers"), "answers")
    first = EntropySolver(setup.start).opener()
    path = own_cache / "openers.json"
    stored = json.loads(path.read_text())
    other = next(w for w in small_lists.allowed if w != first)
    path.write_text(json.dumps({key: {**entry, "value": other} for key, entry in stored.items()}))
    assert EntropySolver(setup.start).opener() == first


def test_folder_manifest_catches_truncated_and_changed_files(tmp_path, tiny_model_dir):  # noqa: F811
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    inputs = {"source": "tiny"}
    assert manifest_problem(folder, inputs) == f"no {MANIFEST}"
    write_manifest(folder, inputs)
    assert manifest_problem(folder, inputs, contents=True) is None
    assert manifest_problem(folder, {"source": "other"}) == "made from other inputs"
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert manifest_problem(folder, inputs) is None  # sizes only: fast, on every use
    assert manifest_problem(folder, inputs, contents=True) == "model.safetensors does not hold what was written"
    weights.write_bytes(bytes(data[:1000]))
    assert manifest_problem(folder, inputs) == f"model.safetensors has 1,000 bytes, not {len(data):,}"
    (folder / MANIFEST).write_text("{")
    assert manifest_problem(folder, inputs) == f"{MANIFEST} is damaged"


def _fake_conversion(tiny_model_dir):  # noqa: F811
    """What `_build` leaves behind, from the tiny model instead of a 93 MB download."""
    from llm.default_model import SOURCE

    def build(out_dir, progress):
        for path in tiny_model_dir.iterdir():
            shutil.copy2(path, out_dir / path.name)
        write_manifest(out_dir, SOURCE)

    return build


def test_doctor_and_loading_see_a_truncated_default_model(own_cache, tiny_model_dir, monkeypatch):  # noqa: F811
    import llm.default_model as default_model
    from llm.doctor import collect

    builds = []
    fake = _fake_conversion(tiny_model_dir)
    monkeypatch.setattr(default_model, "_build", lambda out, progress: (builds.append(out), fake(out, progress)))
    path = default_model.default_model_path()
    assert len(builds) == 1 and default_model.is_default_cached()
    info = collect(runs=1)
    assert info["default_model_cached"] is True and info["default_model_problem"] == ""

    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    info = collect(runs=1)
    assert info["default_model_cached"] is False
    assert info["default_model_problem"].startswith("model.safetensors has 1,000 bytes")
    assert default_model.default_model_path() == path and len(builds) == 2  # converted again
    assert default_model.is_default_cached()
    assert (path / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()


def test_a_default_model_converted_before_manifests_is_kept_if_it_still_answers(own_cache, tiny_model_dir,
                                                                                  monkeypatch):  # noqa: F811
    import llm.default_model as default_model

    monkeypatch.setattr(default_model, "_build", lambda out, progress: pytest.fail("converted again"))
    monkeypatch.setattr(default_model, "greedy_answer", lambda folder, question: "Paris.")
    shutil.copytree(tiny_model_dir, default_model.cached_path())
    assert not default_model.is_default_cached()
    assert default_model.default_model_path() == default_model.cached_path()
    assert default_model.is_default_cached()


def test_a_truncated_model_converted_before_manifests_is_converted_again(own_cache, tiny_model_dir,
                                                                         monkeypatch):  # noqa: F811
    import llm.default_model as default_model

    builds = []
    fake = _fake_conversion(tiny_model_dir)
    monkeypatch.setattr(default_model, "_build", lambda out, progress: (builds.append(out), fake(out, progress)))
    path = default_model.cached_path()
    shutil.copytree(tiny_model_dir, path)
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # the real check question fails to even load it
    assert default_model.default_model_path() == path and len(builds) == 1
    assert default_model.is_default_cached()
