"""Click options for commands that run a language model, declared once."""

from __future__ import annotations

from typing import Callable

import click

from common.options import FiniteFloat, knob_option
from llm.generation import MAX_TEMPERATURE, SamplingSettings
from llm.loading import DTYPE

DEFAULTS = SamplingSettings()

dtype_option = knob_option(DTYPE)


def model_options(f: Callable) -> Callable:
    for decorator in reversed((
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
        click.option("--batch-size", type=click.IntRange(1), default=32, show_default=True,
                     help="Answers generated at once (the games played do not depend on it)."),
        dtype_option,
    )):
        f = decorator(f)
    return f
