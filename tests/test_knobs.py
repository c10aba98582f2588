"""Each RL knob is declared once, in its settings field (common/knobs.py): the checks, the `rl`
flags and the pipeline's RL settings are all read off those declarations."""

from __future__ import annotations

from dataclasses import fields

from click.testing import CliRunner

from cli import cli
from common.knobs import knobs_of
from common.options import SEED
from llm.loading import DTYPE
from rl.commands import FLAGS
from rl.config import KNOBS, RLConfig, build_config
from rl.pipeline import RL_FLAGS, RL_KEY, PipelineSettings


def leaves(tree: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in tree.items():
        keys |= leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key}
    return keys


def test_every_setting_of_a_run_is_a_declared_knob():
    assert set(KNOBS) == leaves(RLConfig().to_json())


def test_every_default_passes_its_own_declaration():
    for entry in KNOBS.values():
        if entry.knob.range is not None:
            assert entry.knob.range.holds(entry.default), entry.key
        if entry.knob.choices:
            assert entry.default in entry.knob.choices, entry.key
    assert build_config({}) == RLConfig()


def test_every_flagged_knob_is_an_rl_option_once():
    help_text = CliRunner().invoke(cli, ["rl", "--help"], terminal_width=200).output
    assert len(set(FLAGS.values())) == len(FLAGS)
    for flag in FLAGS.values():
        assert f"  {flag} " in help_text, flag


def test_the_pipeline_names_its_own_flag_for_every_rl_knob_it_sets():
    settings = [f for f in fields(PipelineSettings) if RL_KEY in f.metadata]
    assert {f.metadata[RL_KEY] for f in settings} == set(RL_FLAGS) <= set(KNOBS)
    assert RL_FLAGS["rollout.group_size"] == "--group-size" and RL_FLAGS["steps"] == "--rl-steps"


def test_the_seed_and_the_dtype_are_declared_once():
    for entry in (SEED, DTYPE):
        assert knobs_of(RLConfig)[entry.key].knob == entry.knob
        for command in ("eval", "sft", "pipeline", *(("gen-sft",) if entry is SEED else ())):
            (option,) = [p for p in cli.commands[command].params if entry.knob.flag in p.opts]
            assert (option.default, option.help) == (entry.default, entry.knob.help), (command, entry.key)
