"""The model's own share of each first token among the words it opens: the `--word-prior model`
of studies/naming_probe.py (the product's naming head shares it evenly: llm/naming_head.py).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from llm.word_steering import WordTokens


def continuation_offsets(model: nn.Module, tokenizer, vocabulary: WordTokens, context: str = "Only",
                         batch: int = 512) -> np.ndarray:
    """Each word's share of its first token by the model's own continuation: log P(the rest of
    its tokens | `context`, its first token), normalised over the words that share the token (so
    the first token's logit is still the model's). An even share gives the 10,921 several-token
    allowed words, mostly ones no answer list holds, as much as the common ones; the model knows
    which are common."""
    prefix = tokenizer.encode(context, add_special_tokens=False)
    log_p = np.zeros(len(vocabulary.words), dtype=np.float64)
    several = [i for i, s in enumerate(vocabulary.sequences) if len(s) > 1]
    for start in range(0, len(several), batch):
        chosen = several[start:start + batch]
        sequences = [prefix + list(vocabulary.sequences[i]) for i in chosen]
        width = max(len(s) for s in sequences)
        logits = model(mx.array([s + [0] * (width - len(s)) for s in sequences])).astype(mx.float32)
        log_probs = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
        for row, (i, tokens) in enumerate(zip(chosen, sequences)):
            places = np.arange(len(prefix), len(tokens) - 1)  # each later token, predicted from the one before
            log_p[i] = log_probs[row, places, tokens[len(prefix) + 1:]].sum()
    _, group = np.unique(vocabulary.first, return_inverse=True)
    peak = np.full(group.max() + 1, -np.inf)
    np.maximum.at(peak, group, log_p)
    sums = np.zeros(group.max() + 1)
    np.add.at(sums, group, np.exp(log_p - peak[group]))
    return (log_p - peak[group] - np.log(sums[group])).astype(np.float32)
