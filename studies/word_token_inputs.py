"""What a folded model reads after it wrote a word of several tokens as one word token (llm/head_words.py).

At a model's own one-candidate positions on held-out validation secrets written by several tokens
(its games in an eval JSON), the thought up to ` Only` is the model's; then the secret's word token,
` remains.</think><guess>`, the word token again. Three teacher-forced next-token checks, for each input
embedding of the longer words' tokens (the last token's, the head row's direction, both):
does ` remains` follow the word, does the tag name the word token, does `</` follow it there.

    python -m studies.word_token_inputs --model runs/x5 --games results/distill-words/words-validation.json \
        --json results/head-words/word-token-inputs.json
"""

from __future__ import annotations

from llm.blas import ensure_fast_blas

if __name__ == "__main__":
    ensure_fast_blas()  # before mlx loads: a reference BLAS makes this 50x slower

import json  # noqa: E402

import click  # noqa: E402
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from common.fileio import atomic_write_json  # noqa: E402
from eval.endgame import model_answers  # noqa: E402
from eval.splits import is_validation  # noqa: E402
from llm.format import NAMING_WORD, prompt_tokens  # noqa: E402
from llm.loading import load_model  # noqa: E402
from llm.tokenizing import tokens_after  # noqa: E402
from llm.word_steering import WordTokens  # noqa: E402
from solver.setup import load_setup  # noqa: E402

VARIANTS = {"last token": (1.0, 0.0), "head row": (0.0, 1.0), "last token + head row": (1.0, 1.0)}


@click.command()
@click.option("--model", "folder", required=True, help="A folded export (export --fold-head).")
@click.option("--games", required=True, help="An eval JSON of games on validation secrets (the thoughts used).")
@click.option("--positions", default=50, show_default=True)
@click.option("--json", "json_path", required=True)
def main(folder: str, games: str, positions: int, json_path: str) -> None:
    model, tokenizer = load_model(folder)
    setup = load_setup("answers")
    words = list(setup.lists.allowed)
    size = model.model.embed_tokens.weight.shape[0] - len(words)
    vocabulary = WordTokens.of(tokenizer, words)
    longer = {w for w, s in zip(words, vocabulary.sequences) if len(s) > 1}
    chosen = [(p, m["text"]) for p, m in model_answers(setup, json.loads(open(games).read()), 1)
              if is_validation(p.secret) and p.secret in longer and f" {NAMING_WORD} " in (m.get("text") or "")]
    chosen = chosen[:positions]
    embeddings = np.array(model.model.embed_tokens.weight.astype(mx.float32))
    rows = np.array(model.lm_head.weight[size:].astype(mx.float32))
    lasts = embeddings[[s[-1] for s in vocabulary.sequences]]
    directions = rows / np.linalg.norm(rows, axis=1, keepdims=True) * np.linalg.norm(embeddings[:size], axis=1).mean()
    remains, close = (tokens_after(tokenizer, " crane", [text])[0][0] for text in (" remains", "</guess>"))
    report = {"model": folder, "games": games, "positions": len(chosen), "variants": {}}
    for name, (last, head) in VARIANTS.items():
        inputs = embeddings.copy()
        multi = np.array([w in longer for w in words])
        inputs[size:][multi] = last * lasts[multi] + head * directions[multi]
        model.model.embed_tokens.weight = mx.array(inputs)
        counts = np.zeros(3, int)
        for position, text in chosen:
            word = size + words.index(position.secret)
            before = prompt_tokens(tokenizer, position.state, position.rejected) + \
                tokenizer.encode(text[:text.index(f" {NAMING_WORD} ") + len(NAMING_WORD) + 1], add_special_tokens=False)
            after = tokens_after(tokenizer, " " + position.secret, [" remains.</think><guess>"])[0]
            ids = before + [word, *after, word]
            hidden = model.model(mx.array([ids]))[0]
            logits = model.lm_head(hidden[mx.array([len(before), len(ids) - 2, len(ids) - 1])])
            top = np.array(mx.argmax(logits, axis=1))
            counts += top == np.array([remains, word, close])
        report["variants"][name] = dict(zip(("remains_after_the_word", "tag_names_the_word", "close_after_the_tag"),
                                            counts.tolist()))
        click.echo(f"{name}: {report['variants'][name]} of {len(chosen)}")
    model.model.embed_tokens.weight = mx.array(embeddings)
    atomic_write_json(json_path, report)


if __name__ == "__main__":
    main()
