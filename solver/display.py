"""Coloured Wordle tiles for the terminal."""

from __future__ import annotations

from rich.text import Text

from solver.feedback import pattern_to_digits

TILE_STYLES = ("bold white on grey35", "bold black on yellow3", "bold white on green4")


def tiles(guess: str, pattern: int) -> Text:
    text = Text()
    for letter, tile in zip(guess, pattern_to_digits(pattern)):
        text.append(f" {letter.upper()} ", style=TILE_STYLES[tile])
    return text
