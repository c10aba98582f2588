"""The user message eval shows the model after a history, from llm/format.py: what to hand
`python -m mlx_lm generate --prompt` so that a plain runtime sees the position eval shows.

    python -m studies.user_message "crate:00102,mails:02000,badge:02012"
"""

from __future__ import annotations

import sys

from llm.format import render_state
from solver.setup import load_setup
from solver.solve_views import parse_history
from solver.state import state_from_history


def user_message(history: str) -> str:
    """The message after `history`, written as `play --history` takes it ("crate:00102,...")."""
    setup = load_setup("answers")
    return render_state(state_from_history(setup.lists, setup.matrix, parse_history(history)))


if __name__ == "__main__":
    print(user_message(sys.argv[1]))
