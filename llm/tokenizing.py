"""Text as the model reads it in context, and the check that a tokenizer can serve the game.

A tokenizer does not always write a piece of text alone as it writes it inside a longer one.
A SentencePiece-style tokenizer (Llama 2, Mistral, Phi-3, Gemma: a word's start marked `▁`)
puts a `▁` before the first word of a text, so ` Only` alone is `▁`, `Only` or `▁▁Only` while
after "remains." it is `▁Only`; a byte-level BPE (SmolLM2, Qwen, Llama 3) writes both alike.
Wherever tokens are matched against what the model writes (the naming token, the words a head
names, the stop tag, the guess constraint, the expert's answer in a GRPO group) they are the
text's tokens after the text that comes before it (`tokens_after`).

`check_tokenizer` refuses, in one line, a tokenizer that cannot play at all: no chat template,
one that refuses the game's messages, no end-of-sequence token, or one that does not give back
the game's text (a Qwen2 folder shipping a SentencePiece tokenizer.json: transformers builds its
Qwen2 tokenizer from the model type and drops every space).
"""

from __future__ import annotations

from pathlib import Path

from common.errors import UserError
from llm.format import SYSTEM_PROMPT, format_answer, one_left

# A user turn and an answer in the game's format: what a tokenizer must write and give back.
_SAMPLE_USER = "Turn 1: salet -> grey grey yellow grey green. You have 5 guesses left. What is your guess?"
_SAMPLE_ANSWER = format_answer(f"Pattern: _O__Y. Absent: A, E, S, T. {one_left('lowly')}", "lowly")


def tokens_after(tokenizer, before: str, texts: list[str]) -> list[tuple[int, ...]]:
    """Each of `texts`' tokens as the tokenizer writes them right after `before` (the tokens of
    `before` + text, less those of `before` alone). Where the two do not split at the boundary (a
    token spans it), the text's tokens alone."""
    backend = getattr(tokenizer, "backend_tokenizer", None)  # a fast tokenizer encodes 12,972 words at once

    def encode(strings: list[str]) -> list[list[int]]:
        if backend is not None:
            return [e.ids for e in backend.encode_batch(strings, add_special_tokens=False)]
        return [tokenizer.encode(s, add_special_tokens=False) for s in strings]

    lead = encode([before])[0]
    joined = encode([before + text for text in texts])
    alone = None
    out = []
    for i, ids in enumerate(joined):
        if ids[:len(lead)] == lead and len(ids) > len(lead):
            out.append(tuple(ids[len(lead):]))
        else:
            alone = alone or encode(texts)
            out.append(tuple(alone[i]))
    return out


def check_tokenizer(tokenizer, path: Path) -> None:
    """A one-line `UserError` naming `path` when its tokenizer cannot play the game: no chat
    template, a template that refuses the game's system and user messages, no end-of-sequence
    token, or text that does not come back as it was written (tokens it cannot write)."""
    where = f"the tokenizer in {path}"
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(f"{where} has no chat template (tokenizer_config.json's chat_template or "
                        "chat_template.jinja): the game asks the model through it; use an instruct model's folder")
    conversation = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": _SAMPLE_USER},
                    {"role": "assistant", "content": _SAMPLE_ANSWER}]
    try:
        tokenizer.apply_chat_template(conversation, tokenize=True)
    except Exception as err:  # a template raises whatever its author wrote (jinja's TemplateError, ValueError)
        message = " ".join(str(err).split())[:200]
        raise UserError(f"{where}: its chat template refuses the game's system, user and assistant messages "
                        f"({message})") from err
    if not list(getattr(tokenizer, "eos_token_ids", None) or []):
        raise UserError(f"{where} has no end-of-sequence token: an answer would never end")
    for text in (SYSTEM_PROMPT, _SAMPLE_USER, _SAMPLE_ANSWER):
        back = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False))
        if back != text:
            shown = next(i for i, (a, b) in enumerate(zip(text + "\0", back + "\0")) if a != b)
            raise UserError(f"{where} does not give the game's text back: {text[max(0, shown - 20):shown + 20]!r} "
                            f"becomes {back[max(0, shown - 20):shown + 20]!r} (a tokenizer.json that does not "
                            f"match the model type in config.json, or tokens it cannot write)")

