"""Click options for commands that run a language model, declared once."""

from __future__ import annotations

from typing import Callable

import click

from common.options import FiniteFloat, knob_option
from llm.generation import MAX_TEMPERATURE, SamplingSettings
from llm.loading import DTYPE

DEFAULTS = SamplingSettings()

dtype_option = knob_option(DTYPE)


_MODEL_OPTIONS = (
    click.option("--model", default=None, help="mlx-lm model folder, Hugging Face id, or 'default' "
                                                "(SmolLM2-135M-Instruct, embedded)."),
    click.option("--adapter", type=click.Path(file_okay=False), default=None,
                 help="LoRA adapter folder (as mlx-lm writes it) to apply."),
    click.option("--temperature", type=FiniteFloat(0.0, MAX_TEMPERATURE), default=DEFAULTS.temperature,
                 show_default=True),
    click.option("--top-p", type=FiniteFloat(0.0, 1.0, min_open=True), default=DEFAULTS.top_p,
                 show_default=True),
    click.option("--max-tokens", type=click.IntRange(8), default=DEFAULTS.max_tokens, show_default=True,
                 help="Longest answer generated per guess."),
)
_BATCH_OPTION = click.option("--batch-size", type=click.IntRange(1), default=32, show_default=True,
                             help="Answers generated at once (the games played do not depend on it).")


def _decorated(f: Callable, options: tuple[Callable, ...]) -> Callable:
    for decorator in reversed(options):
        f = decorator(f)
    return f


def model_options(f: Callable) -> Callable:
    return _decorated(f, (*_MODEL_OPTIONS, _BATCH_OPTION, dtype_option))


def one_answer_model_options(f: Callable) -> Callable:
    """The model's options for a command that asks for one answer at a time (`play`): no --batch-size."""
    return _decorated(f, (*_MODEL_OPTIONS, dtype_option))


naming_head_option = click.option(
    "--naming-head/--no-naming-head", default=True, show_default=True,
    help="Play with the naming head saved beside --adapter (naming_head.npz, written by `naming-head`; with no "
         "--adapter, one copied into --model's folder, an `export` of that adapter), when there is one: where the "
         "model writes ' Only', the head names a whole allowed word, never one played or refused at that turn; the "
         "rest of every answer is the model's.")
