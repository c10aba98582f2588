"""eval's account of where games are lost (eval/harness.py `where_lost`), on real games."""

from eval.harness import GameRecord, play_games, where_lost
from eval.moves import SolverPlayer
from llm.format import Move
from solver.setup import load_setup


class ScriptedPlayer:
    """Plays a fixed list of guesses, the same for every game (a real player of words, not a model)."""

    name = "scripted"

    def __init__(self, guesses: list[str]) -> None:
        self.guesses = guesses

    def moves(self, states, rejected):
        return [Move(self.guesses[len(state.turns)]) for state in states]


def test_losses_are_told_by_the_candidates_left_and_closing_is_counted_from_one_candidate():
    setup = load_setup("answers")
    # after crate, hoist the secret ghost is the one candidate left (eval/endgame positions of that game);
    # naming other words then loses the game with one candidate left
    losing = play_games(ScriptedPlayer(["crate", "hoist", "aahed", "abbey", "abhor", "abide"]), setup, ["ghost"],
                        measure_moves=False, show_progress=False)
    assert len(losing[0].state.candidates) == 1 and not losing[0].state.won
    closing = play_games(ScriptedPlayer(["crate", "hoist", "ghost"]), setup, ["ghost"], measure_moves=False,
                         show_progress=False)
    assert closing[0].state.won
    wide = play_games(ScriptedPlayer(["fuzzy", "jazzy", "mummy", "puppy", "fluff", "civic"]), setup,
                      ["ghost"], measure_moves=False, show_progress=False)
    figures = where_lost(losing + closing + wide)
    assert figures["lost_one_left"] == 1 and figures["lost_two_to_six_left"] == 0
    assert figures["lost_seven_or_more_left"] == 1
    assert figures["reached_one_left"] == 2 and figures["closed_from_one_left"] == 1
    solver = play_games(SolverPlayer(setup.solver()), setup, ["ghost", "crane"], measure_moves=False,
                        show_progress=False)
    assert where_lost(solver)["lost_one_left"] == 0


def test_a_models_histogram_shows_the_solvers_on_the_same_secrets_beside_it():
    from rich.console import Console

    from eval.report import histogram
    from eval.run import solver_beside
    from solver.policy import SolverSettings

    setup = load_setup("answers")
    solver = solver_beside(setup, SolverSettings(), ["crane", "lowly", "fuzzy"])
    assert solver["wins"] == 3 and sum(solver["histogram"].values()) == 3
    result = {"histogram": {"1": 0, "2": 0, "3": 1, "4": 0, "5": 0, "6": 0, "X": 2}, "solver_same_secrets": solver}
    console = Console(record=True, width=100)
    console.print(histogram(result))
    text = console.export_text()
    assert "the solver on the same secrets" in text
    assert f"solver {solver['histogram']['X']}" in text.splitlines()[-1]
