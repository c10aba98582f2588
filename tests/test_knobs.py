"""Each knob is declared once, in its settings field (common/knobs.py): the checks, the `rl`, `sft`,
`gen-sft` and `pipeline` flags and the pipeline's stage settings are all read off those declarations."""

from __future__ import annotations

from dataclasses import fields

import click
import pytest
from click.testing import CliRunner

from cli import cli
from common.errors import UserError
from common.knobs import Declared, declared, knobs_of
from common.options import SEED, flag
from llm.loading import DTYPE
from rl.commands import FLAGS
from rl.config import KNOBS, RLConfig, build_config
from rl.pipeline import HEAD_RL_FLAGS, RL_FLAGS, RL_KEY, PipelineSettings
from sft.config import KNOBS as SFT_KNOBS
from sft.config import SFTConfig
from sft.gen_data import GenSettings
from test_bad_output import assert_one_error

# Each command whose options are read off declarations, the knobs it has a flag for, and the
# arguments that make it stop at a missing file should a value get through.
DERIVED = {
    "sft": (list(SFT_KNOBS.values()), ["--data", "/nonexistent", "--out", "{tmp}/run"]),
    "gen-sft": (list(declared(GenSettings)), ["--out", "{tmp}/data", "--answers", "/nonexistent"]),
    "pipeline": ([entry for entry in declared(PipelineSettings) if entry.knob.flag],
                 ["--model", "/nonexistent", "--out", "{tmp}/p"]),
}


def leaves(tree: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in tree.items():
        keys |= leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key}
    return keys


def test_every_setting_of_a_run_is_a_declared_knob():
    assert set(KNOBS) == leaves(RLConfig().to_json())


def test_every_default_passes_its_own_declaration():
    for settings in (RLConfig, SFTConfig, GenSettings, PipelineSettings):
        for entry in declared(settings):
            if entry.knob.range is not None and entry.default is not None:
                assert entry.knob.range.holds(entry.default), entry.key
            if entry.knob.choices:
                assert entry.default in entry.knob.choices, entry.key
    assert build_config({}) == RLConfig()
    SFTConfig(model="default", data=None, out="run").check()
    PipelineSettings().check()


def test_every_flagged_knob_is_an_rl_option_once():
    help_text = CliRunner().invoke(cli, ["rl", "--help"], terminal_width=200).output
    assert len(set(FLAGS.values())) == len(FLAGS)
    for flag_ in FLAGS.values():
        assert f"  {flag_} " in help_text, flag_


def test_the_pipeline_names_its_own_flag_for_every_rl_knob_it_sets():
    settings = [f for f in fields(PipelineSettings) if RL_KEY in f.metadata]
    assert {f.metadata[RL_KEY] for f in settings} == set(RL_FLAGS) | set(HEAD_RL_FLAGS) <= set(KNOBS)
    assert RL_FLAGS["rollout.group_size"] == "--group-size" and RL_FLAGS["steps"] == "--rl-steps"
    assert HEAD_RL_FLAGS["steps"] == "--head-rl-steps" and HEAD_RL_FLAGS["head.games"] == "--head-games"
    assert all(entry.knob.flag == flag(entry.key) for entry in DERIVED["pipeline"][0])


def option(command: str, entry: Declared) -> click.Option:
    (found,) = [p for p in cli.commands[command].params if entry.knob.flag in p.opts]
    return found


@pytest.mark.parametrize("command", DERIVED)
def test_every_flagged_knob_is_an_option_as_declared(command):
    entries, _ = DERIVED[command]
    assert entries and all(entry.knob.flag for entry in entries)
    for entry in entries:
        param = option(command, entry)
        assert (param.name, param.default, param.help) == (entry.key, entry.default, entry.knob.help), entry.key
        assert param.is_flag == (entry.base is bool), entry.key


def refused(entry: Declared) -> str:
    """A value the knob's declaration refuses: a choice it does not offer, or one just below its range."""
    if entry.knob.choices:
        return "bogus"
    low = entry.knob.range.low
    return str(low if entry.knob.range.open_low else (low - 1 if entry.base is int else low - 0.5))


@pytest.mark.parametrize("command", DERIVED)
def test_a_value_out_of_a_declaration_is_one_error_line(tmp_path, command):
    entries, args = DERIVED[command]
    for entry in entries:
        if entry.knob.range is None and not entry.knob.choices:
            continue
        result = CliRunner().invoke(cli, [command, *(a.format(tmp=tmp_path) for a in args), entry.knob.flag,
                                          refused(entry)])
        assert_one_error(result, f"'{entry.knob.flag}'")
        assert list(tmp_path.iterdir()) == [], entry.key


def test_the_seed_and_the_dtype_are_declared_once():
    for entry in (SEED, DTYPE):
        for settings in (RLConfig, SFTConfig):
            assert knobs_of(settings)[entry.key].knob == entry.knob
        for command in ("eval", "sft", "gen-sft", "pipeline"):
            if entry is DTYPE and command == "gen-sft":
                continue
            assert option(command, entry).help == entry.knob.help, (command, entry.key)


def test_a_bad_value_from_a_record_or_a_recipe_is_named_as_its_flag():
    with pytest.raises(UserError, match="--sft-iters must be >= 1 and <= 10000000, got 0"):
        PipelineSettings(sft_iters=0).check()
    with pytest.raises(UserError, match="--iters must be a whole number, got 'many'"):
        SFTConfig(model="default", data=None, out="run", iters="many").check()
    with pytest.raises(UserError, match="--eval-games must be >= 0, got -1"):
        SFTConfig(model="default", data=None, out="run", eval_games=-1).check()
