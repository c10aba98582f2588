"""Play the solver against every allowed secret after a given opener and list the lost games.

    python -m studies.solver_losses tares greedy|lookahead

The walk is the opener choice's own (`solver.opener.play_tree`): the solver's decision
tree, split by feedback at each node, so 12,972 games cost about one pass of the eval.
The last guesses it plays are recorded on the way, and a secret that a last guess does
not hit is a lost game.
"""

from __future__ import annotations

import sys
import time

from solver.feedback import WIN
from solver.opener import play_tree
from solver.policy import SolverSettings
from solver.setup import load_setup
from solver.state import GameState

LOSS = 7  # guesses a lost game counts for in the mean


def main(opener: str, mode: str) -> None:
    setup = load_setup("allowed")
    solver = setup.solver(SolverSettings(lookahead=mode == "lookahead"))
    last_guesses: list[tuple[GameState, str]] = []

    def choose(state: GameState) -> str:
        guess = solver.choose(state)
        if state.guesses_left == 1:
            last_guesses.append((state, guess))
        return guess

    started = time.perf_counter()
    result = play_tree(choose, setup.start, opener)
    print(f"{opener} {mode}: {result.games} games, {result.fails} lost, "
          f"mean {(result.total_guesses + LOSS * result.fails) / result.games:.4f} (a loss = {LOSS}), "
          f"{time.perf_counter() - started:.0f} s")
    for state, guess in last_guesses:
        line = [(t.guess, t.pattern) for t in state.turns] + [guess]
        missed = state.candidates[setup.matrix[setup.lists.index(guess)][state.candidates] != WIN]
        for secret in missed:
            print("  lost", setup.lists.allowed[secret], line)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
