"""Everything a command needs to play: the lists, the pattern matrix, the empty game."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.matrix import pattern_matrix
from solver.policy import EntropySolver, SolverSettings
from solver.state import GameState
from solver.words import WordLists, default_word_lists, load_word_lists


@dataclass
class Setup:
    lists: WordLists
    matrix: np.ndarray
    secret_kind: str

    @property
    def start(self) -> GameState:
        return GameState(self.lists, self.matrix, self.secret_kind)

    def solver(self, settings: SolverSettings = SolverSettings()) -> EntropySolver:
        return EntropySolver(self.start, settings)


def load_setup(secret_kind: str = "answers", answers: str | None = None, allowed: str | None = None) -> Setup:
    lists = load_word_lists(answers, allowed) if (answers or allowed) else default_word_lists()
    lists.secrets(secret_kind)  # validates the name
    return Setup(lists, pattern_matrix(lists, secret_kind), secret_kind)
