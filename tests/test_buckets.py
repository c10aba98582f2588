"""SFT batches are padded to few shapes (sft/trainer.py answer_bucket), and the padding changes nothing."""

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from llm.loading import load_model
from llm_fixtures import tiny_model_dir  # noqa: F401
from sft.lora import AdapterSettings, attach_adapter
from sft.trainer import answer_bucket, answer_loss_for, collate, tokenize
from test_sft import conversations  # noqa: F401


def test_answer_buckets_are_few_and_hold_every_position():
    sizes = {answer_bucket(n) for n in range(1000, 2049)}
    assert len(sizes) <= 5
    assert all(n <= answer_bucket(n) <= 1.25 * n + 32 for n in range(1, 5000))


def test_a_bucketed_batch_has_the_plain_batchs_loss_and_gradient(tiny_model_dir, conversations):  # noqa: F811
    model, tokenizer = load_model(str(tiny_model_dir))
    attach_adapter(model, AdapterSettings(rank=2))
    batch = collate(tokenize(tokenizer, conversations[:6]))
    count = batch.answer_tokens
    assert batch.answer_at.size == answer_bucket(count) > count  # padded beyond the real positions
    plain = (batch.answer_at[:count], batch.weights[:count])
    loss_and_grad = nn.value_and_grad(model, answer_loss_for(model))
    (bucketed_loss, _), bucketed = loss_and_grad(model, batch.inputs, batch.answer_at, batch.weights)
    (plain_loss, _), exact = loss_and_grad(model, batch.inputs, *plain)
    assert abs(bucketed_loss.item() - plain_loss.item()) < 1e-6
    for (_, a), (_, b) in zip(tree_flatten(bucketed), tree_flatten(exact)):
        assert mx.allclose(a, b, atol=1e-6).item()
