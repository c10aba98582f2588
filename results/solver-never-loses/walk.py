"""Play the solver against every allowed secret after a given opener and list the lost games.

    python results/solver-never-loses/walk.py tares greedy|lookahead

The walk is the opener choice's own (`solver.opener.play_tree`): the solver's decision
tree, split by feedback at each node, so 12,972 games cost about one pass of the eval.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from solver.feedback import WIN
from solver.policy import SolverSettings
from solver.setup import load_setup
from solver.state import MAX_GUESSES


def main(opener: str, mode: str) -> None:
    setup = load_setup("allowed")
    solver = setup.solver(SolverSettings(lookahead=mode == "lookahead"))
    lists, matrix = setup.lists, setup.matrix
    started = time.perf_counter()
    total, games, lost = 0, 0, []
    stack = [(setup.start, opener)]
    while stack:
        state, guess = stack.pop()
        patterns = matrix[lists.index(guess)][state.candidates]
        turn = len(state.turns) + 1
        for pattern in np.unique(patterns):
            if pattern == WIN:
                total, games = total + turn, games + 1
            elif turn == MAX_GUESSES:
                line = [(t.guess, t.pattern) for t in state.turns] + [(guess, int(pattern))]
                secrets = state.candidates[patterns == pattern]
                lost += [(lists.allowed[c], line) for c in secrets]
                total, games = total + 7 * len(secrets), games + len(secrets)
            else:
                child = state.play(guess, int(pattern))
                stack.append((child, solver.choose(child)))
    print(f"{opener} {mode}: {games} games, {len(lost)} lost, mean {total / games:.4f} (a loss = 7), "
          f"{time.perf_counter() - started:.0f} s")
    for secret, line in lost:
        print("  lost", secret, line)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
