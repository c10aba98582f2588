"""The user message eval shows the model after a history, from llm/format.py: what to hand
`python -m mlx_lm generate --prompt` so that a plain runtime sees the position eval shows.

    python -m studies.user_message "crate:00102,mails:02000,badge:02012"
"""

from __future__ import annotations

import sys

from llm.format import render_state
from solver.feedback import parse_pattern
from solver.setup import load_setup
from solver.state import state_from_history


def user_message(history: str) -> str:
    """The message after `history` ("guess:pattern,..." with patterns of 0/1/2)."""
    setup = load_setup("answers")
    pairs = [item.split(":") for item in history.split(",")]
    return render_state(state_from_history(setup.lists, setup.matrix, [(w, parse_pattern(p)) for w, p in pairs]))


if __name__ == "__main__":
    print(user_message(sys.argv[1]))
