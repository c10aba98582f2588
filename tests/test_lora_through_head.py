"""The LoRA-through-the-head study (studies/lora_through_head.py) runs end to end on a tiny model:
its curve starts at the head alone and its LoRA trains only the top layers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from llm_fixtures import tiny_model_dir  # noqa: F401  (fixture)
from test_naming_head import tiny_adapter  # noqa: F401  (fixture)

from llm.naming_head import HEAD_FILE, SPELLING_FEATURES, NamingHead
from studies.lora_through_head import main


@pytest.mark.slow  # two minutes: the head's 100 validation positions are the solver's games
def test_the_study_trains_a_top_layer_lora_through_a_fixed_head(tiny_model_dir, tiny_adapter, tmp_path):  # noqa: F811
    rng = np.random.default_rng(0)
    hidden = json.loads((tiny_model_dir / "config.json").read_text())["hidden_size"]
    NamingHead(rng.normal(size=(2, hidden)).astype(np.float32) * 0.1, rng.normal(size=(hidden, 2)).astype(np.float32),
               rng.normal(size=(SPELLING_FEATURES, hidden)).astype(np.float32) * 0.1, 0.02).save(tiny_adapter / HEAD_FILE)
    out = tmp_path / "study.json"
    result = CliRunner().invoke(main, ["--model", str(tiny_model_dir), "--adapter", str(tiny_adapter), "--positions", "8",
                                       "--layers", "1", "--steps", "3", "--batch", "4", "--eval-every", "1",
                                       "--lr", "1e-2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert [point["step"] for point in record["curve"]] == [0, 1, 2, 3]
    assert record["head_alone_validation_mean_p"] == record["curve"][0]["validation_mean_p"] > 0
    assert record["validation_positions"] == 100 and record["lora_layers"] == 1
    assert record["trainable_parameters"] > 0
    assert record["curve"][-1]["train_mean_p"] != record["curve"][0]["train_mean_p"]
