"""Issue 63, data lost: no command deletes or overwrites what it does not own.

`gen-sft --overwrite` deletes only what its own manifest lists, so a folder that also holds a
user's file or an SFT run made inside it is refused, whole; `--json` and `--png` never replace a
file inside a folder the command writes or reads whole, nor one of its inputs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)

from cli import cli
from test_bad_output import assert_one_error


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by relative path, with its bytes: what must survive a refused command."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, small_lists_files) -> Path:
    """A gen-sft dataset of 6 games on the small lists (tests change copies of it)."""
    data = tmp_path_factory.mktemp("owned") / "G"
    answers, allowed = small_lists_files
    assert run("gen-sft", "--out", data, "--games", 6, "--answers", answers, "--allowed", allowed,
               "--quiet").exit_code == 0
    return data


def gen_sft_again(data: Path, small_lists_files, *extra):
    answers, allowed = small_lists_files
    return run("gen-sft", "--out", data, "--games", 6, "--seed", 1, "--answers", answers, "--allowed", allowed,
               "--quiet", "--overwrite", *extra)


def test_the_dataset_lists_what_overwrite_may_delete(dataset):
    assert json.loads((dataset / "manifest.json").read_text())["files"] == [
        "hf", "manifest.json", "test.jsonl", "train.jsonl", "valid.jsonl"]


def test_gen_sft_overwrite_keeps_an_sft_run_made_inside_its_folder(dataset, tmp_path, small_lists_files,
                                                                   tiny_model_dir):  # noqa: F811
    """`sft --out G/sft` (on another dataset: --out is never inside --data), then `gen-sft --out G
    --overwrite`: refused, the run and the data kept."""
    data = shutil.copytree(dataset, tmp_path / "G")
    trained = run("sft", "--model", tiny_model_dir, "--data", dataset, "--out", data / "sft", "--iters", 1,
                  "--batch-size", 2, "--eval-games", 0, "--quiet")
    assert trained.exit_code == 0, trained.output
    before = snapshot(data)
    assert_one_error(gen_sft_again(data, small_lists_files),
                     f"--out {data} holds sft, which gen-sft did not write; it replaces only a gen-sft dataset of "
                     "its own: move them out of the folder, or choose another --out")
    assert snapshot(data) == before


def test_gen_sft_overwrite_keeps_a_users_file_and_replaces_its_own_dataset(dataset, tmp_path, small_lists_files):
    data = shutil.copytree(dataset, tmp_path / "G")
    (data / "notes.txt").write_text("mine")
    before = snapshot(data)
    assert_one_error(gen_sft_again(data, small_lists_files), "holds notes.txt, which gen-sft did not write")
    assert snapshot(data) == before
    (data / "notes.txt").unlink()
    replaced = gen_sft_again(data, small_lists_files)  # nothing but its own: --overwrite replaces it
    assert replaced.exit_code == 0, replaced.output
    assert json.loads((data / "manifest.json").read_text())["seed"] == 1


def test_a_dataset_written_before_manifests_listed_their_files_is_still_replaced(dataset, tmp_path,
                                                                                 small_lists_files):
    data = shutil.copytree(dataset, tmp_path / "G")
    manifest = json.loads((data / "manifest.json").read_text())
    del manifest["files"]
    (data / "manifest.json").write_text(json.dumps(manifest))
    assert gen_sft_again(data, small_lists_files).exit_code == 0


def test_json_is_refused_onto_what_the_command_owns_before_any_work(dataset, tmp_path, small_lists_files,
                                                                    tiny_model_dir):  # noqa: F811
    """`gen-sft --out D --json D/train.jsonl`, `sft --out R --json R/run.json`, `report R --json
    R/metrics.jsonl`, and the same rule for rl, pipeline, naming-head, eval and report --png."""
    answers, allowed = small_lists_files
    run_dir = tmp_path / "R"
    run_dir.mkdir()
    (run_dir / "run.json").write_text("{}")
    (run_dir / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0}\n')
    before = {folder: snapshot(folder) for folder in (dataset, run_dir)}
    model = str(tiny_model_dir)
    cases = [
        (["gen-sft", "--out", dataset, "--games", 6, "--answers", answers, "--allowed", allowed, "--overwrite",
          "--quiet", "--json", dataset / "train.jsonl"], f"--json {dataset / 'train.jsonl'} is inside --out {dataset}"),
        (["sft", "--model", model, "--data", dataset, "--out", run_dir, "--json", run_dir / "run.json"],
         f"--json {run_dir / 'run.json'} is inside --out {run_dir}"),
        (["sft", "--model", model, "--data", dataset, "--out", tmp_path / "S", "--json", dataset / "train.jsonl"],
         "is inside --data"),
        (["report", run_dir, "--json", run_dir / "metrics.jsonl"],
         f"--json {run_dir / 'metrics.jsonl'} is inside RUN {run_dir}"),
        (["report", run_dir, "--png", run_dir / "run.json"], "--png"),
        (["rl", "--model", model, "--out", run_dir, "--json", run_dir / "config.json"], "is inside --out"),
        (["pipeline", "--model", model, "--out", run_dir, "--json", run_dir / "stages.json"], "is inside --out"),
        (["naming-head", "--model", model, "--adapter", run_dir, "--json", run_dir / "naming_head.npz"],
         "is inside --adapter"),
        (["eval", "--compare", run_dir / "run.json", run_dir / "metrics.jsonl", "--json", run_dir / "run.json"],
         "which this command reads: name another file"),
    ]
    for args, message in cases:
        line = assert_one_error(run(*args), message)
        assert "name a file outside that folder" in line or "name another file" in line
    assert {folder: snapshot(folder) for folder in (dataset, run_dir)} == before
    assert not (tmp_path / "S").exists()


def test_json_beside_the_folder_is_written(tmp_path):
    """The rule refuses only what is inside: a file next to the run folder is the usual place."""
    run_dir = tmp_path / "R"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 0.5}\n')
    result = run("report", run_dir, "--json", tmp_path / "R.json")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "R.json").read_text())["curves"]["loss"]["value"] == [1.0, 0.5]


def test_no_output_lands_on_an_input_or_inside_another_commands_folder(dataset, tmp_path, small_lists_files,
                                                                       tiny_model_dir):  # noqa: F811
    """Issue 85: `eval --answers A --json A` (and --allowed, gen-sft, solve alike) replaced the word
    list with the results, exit 0; `pipeline --sft-start DIR --json DIR/adapter_config.json` the
    user's adapter config; `gen-sft --json OTHER_DATA/train.jsonl` another dataset's file. An
    output flag never names a file the command reads, one inside a folder it reads, nor one inside
    a dataset or run folder another command made. All refused before any work, nothing changed."""
    answers, allowed = small_lists_files
    lists = ["--answers", answers, "--allowed", allowed]
    start = tmp_path / "start"
    start.mkdir()
    (start / "adapters.safetensors").write_bytes(b"weights")
    (start / "adapter_config.json").write_text(json.dumps({"num_layers": 2}))
    rl_run = tmp_path / "RL"
    rl_run.mkdir()
    (rl_run / "run.json").write_text(json.dumps({"model": "default", "start_adapter": None}))
    (rl_run / "metrics.jsonl").write_text("")
    folders = (dataset, answers.parent, start, rl_run)
    before = {folder: snapshot(folder) for folder in folders}
    model = str(tiny_model_dir)
    cases = [
        (["eval", "--games", 1, "--quiet", *lists, "--json", answers], f"--json {answers} is --answers {answers}, "
                                                                       "which this command reads: name another file"),
        (["eval", "--games", 1, "--quiet", *lists, "--json", allowed], f"--json {allowed} is --allowed {allowed}"),
        (["solve", "--word", "crane", *lists, "--json", answers], f"--json {answers} is --answers {answers}"),
        (["gen-sft", "--out", tmp_path / "D", "--games", 2, "--quiet", *lists, "--json", allowed],
         f"--json {allowed} is --allowed {allowed}"),
        (["pipeline", "--model", model, "--sft-start", start, "--out", tmp_path / "P", "--json",
          start / "adapter_config.json"], f"--json {start / 'adapter_config.json'} is inside the SFT start {start}"),
        (["gen-sft", "--out", tmp_path / "D", "--games", 2, "--quiet", *lists, "--json", dataset / "train.jsonl"],
         f"--json {dataset / 'train.jsonl'} is inside {dataset}, a gen-sft dataset: its files are that "
         "command's own; name a file outside it"),
        (["eval", "--games", 1, "--quiet", *lists, "--json", rl_run / "metrics.jsonl"],
         f"--json {rl_run / 'metrics.jsonl'} is inside {rl_run}, an RL run"),
        (["sft", "--model", model, "--data", dataset, "--out", dataset / "sft"],
         f"--out {dataset / 'sft'} is inside --data {dataset}, which this command reads: choose another --out"),
        (["rl", "--model", model, "--adapter", start, "--out", start / "rl"],
         f"--out {start / 'rl'} is inside --adapter {start}, which this command reads: choose another --out"),
        (["gen-sft", "--out", answers.parent, "--games", 2, "--quiet", *lists, "--overwrite"],
         f"--out {answers.parent} holds --answers {answers}, which this command reads: choose another --out"),
    ]
    for args, message in cases:
        assert_one_error(run(*args), message)
    assert {folder: snapshot(folder) for folder in folders} == before
    assert not any((tmp_path / name).exists() for name in ("D", "P"))
