"""The decode-ceiling benchmark runs end to end on a tiny model and writes its --json."""

from __future__ import annotations

from mlx.utils import tree_flatten
from llm_fixtures import run_benchmark, tiny_model_dir  # noqa: F401

from llm.loading import load_model
from bench.decode import main, weight_products


def test_decode_ceiling_benchmark_writes_one_row_per_batch(tiny_model_dir, tmp_path):  # noqa: F811
    report = run_benchmark(main, tiny_model_dir, ["--batch", "1", "--batch", "3", "--context", "8", "--steps", "4"],
                           tmp_path / "decode.json")
    assert [row["batch"] for row in report["rows"]] == [1, 3]
    for row in report["rows"]:
        assert row["decode_step_ms"] > 0 and "sampler_step_ms" in row and row["weights_ms"] > 0
        assert abs(row["weights_tokens_per_s_ceiling"] - row["batch"] / (row["weights_ms"] / 1e3)) \
            <= 0.05 * row["weights_tokens_per_s_ceiling"]
        assert abs(row["tokens_per_s_ceiling"] - row["batch"] / (row["decode_step_ms"] / 1e3)) <= 0.05 * row["tokens_per_s_ceiling"]


def test_weight_products_cover_every_weight_of_the_model(tiny_model_dir):  # noqa: F811
    """The floor counts each weight matrix once, the tied output layer included."""
    model, _ = load_model(str(tiny_model_dir), None)
    counted = sum(weight.size for _, weight in weight_products(model))
    weights = tree_flatten(model.parameters())
    norms = sum(v.size for name, v in weights if "norm" in name)
    assert counted + norms == sum(v.size for _, v in weights)
