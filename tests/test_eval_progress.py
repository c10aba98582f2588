"""A batched eval's progress counts turns, which every answer round advances (issue 85, item 11)."""

from __future__ import annotations

import io

from rich.console import Console

import eval.harness
from common.progress import progress_bar
from eval.harness import play_games
from llm.format import NO_TAGS, Move


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TenSecondRounds:
    """A player of batches whose every round takes 10 s: games 0-2 guess `words` in turn (none a
    secret, so they are lost after six guesses), game 3 writes no guess tag until it is lost."""

    name = "scripted"

    def __init__(self, clock: Clock, words: list[str]) -> None:
        self.clock, self.words, self.asked = clock, words, []

    def submit(self, game, state, rejected) -> None:
        self.asked.append((game, state))

    def finished(self):
        self.clock.now += 10.0
        asked, self.asked = self.asked, []
        return [(game, Move(None, "no guess", NO_TAGS) if game == 3 else Move(self.words[len(state.turns)]))
                for game, state in asked]


def test_a_batched_eval_counts_turns_so_its_rate_and_eta_hold_from_the_first_line(monkeypatch, small_lists_files):
    """All four games are under way from the first round: the old count (games finished) printed
    `0/4 games, - games/s, ETA -` at 30 s; by turns it is 7 of 24 (three rounds of three guesses,
    the line printed at the first answer of round 3), 4.3 s a turn, 73 s for the 17 left; game 3, lost
    to its third refused answer later in that round, counts its six turns at once."""
    from solver.setup import load_setup

    setup = load_setup("answers", *map(str, small_lists_files))
    secrets = list(setup.lists.answers[:4])
    words = [w for w in setup.lists.allowed if w not in secrets][:6]
    clock, stream = Clock(), io.StringIO()
    console = Console(file=stream, force_terminal=False, width=200)
    monkeypatch.setattr(eval.harness, "progress_bar",
                        lambda unit, disable: progress_bar(unit, disable, console=console, clock=clock))
    games = play_games(TenSecondRounds(clock, words), setup, secrets, measure_moves=False)
    assert [len(g.state.turns) for g in games] == [6, 6, 6, 0] and clock.now == 1060.0
    assert [line for line in stream.getvalue().splitlines() if line] == [
        "scripted, 0/4 games over: 7/24 turns, 4.3 s/turn, elapsed 0:00:30, ETA 0:01:13",
        "scripted, 2/4 games over: 22/24 turns, 2.7 s/turn, elapsed 0:01:00, ETA 0:00:05",  # round 6's first answer
        "scripted, 4/4 games over: 24/24 turns, 2.5 s/turn, elapsed 0:01:00, ETA 0:00:00"]  # the last line, at the end
