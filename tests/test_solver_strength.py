"""How strong the expert is, and that the machinery behind it is right.

Fast tests check the search against a plain-Python reference, the tree walk against
game-by-game play, hard-mode legality and the opener cache on small lists. The
`slow` tests are the benchmark targets on the full lists (run with -m slow).
"""

from __future__ import annotations

import json
import random
import time

import numpy as np
import pytest

from common.fileio import cache_dir
from solver.feedback import GREY, WIN, pattern_to_digits
from solver.lookahead import FAIL_PENALTY, finish_estimate, lookahead_costs
from solver.opener import OPENER_VERSION, best_opener, play_tree
from solver.policy import EntropySolver, SolverSettings, _hard_arrays
from solver.setup import Setup, load_setup
from solver.state import MAX_GUESSES, Turn


@pytest.fixture(scope="module")
def small_setup(small_lists_files) -> Setup:
    return load_setup("answers", str(small_lists_files[0]), str(small_lists_files[1]))


def hard_legal(guess: str, turns: tuple[Turn, ...]) -> bool:
    """NYT hard mode, written out plainly: greens stay, revealed letters are reused."""
    for turn in turns:
        tiles = pattern_to_digits(turn.pattern)
        shown: dict[str, int] = {}
        for pos, (letter, tile) in enumerate(zip(turn.guess, tiles)):
            if tile == 2 and guess[pos] != letter:
                return False
            if tile != GREY:
                shown[letter] = shown.get(letter, 0) + 1
        if any(guess.count(letter) < count for letter, count in shown.items()):
            return False
    return True


def play_all(solver: EntropySolver, setup: Setup, hard: bool = False) -> tuple[np.ndarray, float]:
    """Play every secret game by game: (histogram 1..6 + losses, slowest game in seconds)."""
    hist = np.zeros(MAX_GUESSES + 1, dtype=np.int64)
    slowest = 0.0
    for column, secret in enumerate(setup.lists.secrets(setup.secret_kind)):
        start = time.perf_counter()
        state = setup.start
        while not state.over:
            guess = solver.choose(state)
            assert not hard or hard_legal(guess, state.turns), (secret, state.guesses, guess)
            state = state.play(guess, int(setup.matrix[setup.lists.index(guess), column]))
        slowest = max(slowest, time.perf_counter() - start)
        hist[len(state.turns) - 1 if state.won else MAX_GUESSES] += 1
    return hist, slowest


def mean_guesses(hist: np.ndarray) -> float:
    return float((hist[:MAX_GUESSES] * np.arange(1, MAX_GUESSES + 1)).sum() / hist.sum())


# -- the search against a plain reference --------------------------------------------

def reference_guess(setup, pool, guess, cands, left, depth, hard, greens, mins) -> float:
    """What `lookahead_costs` computes, written as the obvious recursion (no pruning)."""
    row = setup.matrix[guess][cands]
    total = 1.0
    for pattern in np.unique(row):
        if pattern == WIN:
            continue
        bucket = cands[row == pattern]
        sub_greens, sub_mins = greens.copy(), mins.copy()
        if hard:
            shown = np.zeros(26, dtype=np.int8)
            word = setup.lists.allowed_codes[guess]
            for pos, tile in enumerate(pattern_to_digits(int(pattern))):
                if tile == 2:
                    sub_greens[pos] = word[pos]
                if tile != GREY:
                    shown[word[pos]] += 1
            sub_mins = np.maximum(sub_mins, shown)
        value = reference_position(setup, pool, bucket, left - 1, depth - 1, hard, sub_greens, sub_mins)
        total += len(bucket) / len(cands) * value
    return total


def reference_position(setup, pool, cands, left, depth, hard, greens, mins) -> float:
    n = len(cands)
    if left <= 0:
        return FAIL_PENALTY
    if n == 1:
        return 1.0
    if left == 1:
        return 1.0 + (n - 1) / n * FAIL_PENALTY
    if n == 2:
        return 1.5
    if depth <= 0 and left > 2:
        return finish_estimate(n, left, hard)
    rows = list(setup.lists.answer_rows[cands])
    codes = setup.lists.allowed_codes
    for row in pool:
        word = codes[row]
        green_ok = all(greens[p] < 0 or word[p] == greens[p] for p in range(5))
        if not hard or (green_ok and all(np.bincount(word, minlength=26) >= mins)):
            rows.append(row)
    return min(reference_guess(setup, pool, g, cands, left, max(depth, 1), hard, greens, mins) for g in rows)


@pytest.mark.parametrize("hard", [False, True])
def test_search_matches_the_plain_recursion(small_setup, hard):
    solver = EntropySolver(small_setup.start, SolverSettings(hard=hard, lookahead=True))
    rng = random.Random(7)
    lists = small_setup.lists
    checked = 0
    while checked < 12:
        secret = rng.choice(lists.answers)
        state = small_setup.start
        for guess in rng.sample(lists.answers, 2):
            state = state.play(guess, int(small_setup.matrix[lists.index(guess), lists.answers.index(secret)]))
        if not 3 <= len(state.candidates) <= 25:
            continue
        pool = np.array(rng.sample(range(len(lists.allowed)), 25), dtype=np.int64)
        shortlist = np.concatenate([lists.answer_rows[state.candidates[:3]], pool[:3]])
        greens, mins = _hard_arrays(state)
        game = (small_setup.matrix, lists.allowed_codes, solver._letter_counts, lists.answer_rows, pool)
        for left in (3, 4):
            got = lookahead_costs(game, shortlist, state.candidates, left, 2, hard, greens, mins, np.inf)
            want = [reference_guess(small_setup, pool, g, state.candidates, left, 2, hard, greens, mins)
                    for g in shortlist]
            np.testing.assert_allclose(got, want, rtol=1e-9)
        checked += 1


# -- the tree walk, hard mode and the opener on small lists ---------------------------

@pytest.mark.parametrize("settings", [SolverSettings(), SolverSettings(lookahead=True),
                                      SolverSettings(hard=True, lookahead=True)], ids=lambda s: s.label)
def test_tree_walk_is_game_by_game_play(small_setup, settings):
    """Opener selection walks the decision tree; it must score exactly what eval plays."""
    solver = EntropySolver(small_setup.start, settings)
    hist, _ = play_all(solver, small_setup, hard=settings.hard)  # also asserts hard-mode legality
    tree = play_tree(solver.choose, small_setup.start, solver.opener())
    assert tree.wins.tolist() == hist[:MAX_GUESSES].tolist() and tree.fails == hist[MAX_GUESSES] == 0


def test_opener_is_computed_once_and_cached(small_setup, monkeypatch):
    settings = SolverSettings(lookahead=True, top_k=5)
    first = EntropySolver(small_setup.start, settings).opener()
    key = f"{small_setup.lists.fingerprint}-answers-{settings.label}-v{OPENER_VERSION}"
    assert json.loads((cache_dir() / "openers.json").read_text())[key]["value"] == first
    monkeypatch.setattr("solver.policy.best_opener", lambda *args: pytest.fail("opener recomputed"))
    assert EntropySolver(small_setup.start, settings).opener() == first


def test_opener_beats_the_other_shortlisted_openers(small_setup):
    solver = EntropySolver(small_setup.start, SolverSettings())
    chosen = play_tree(solver.choose, small_setup.start, solver.opener())
    for rival in solver.rank(small_setup.start, 5):
        other = play_tree(solver.choose, small_setup.start, rival.word)
        assert (chosen.fails, chosen.total_guesses) <= (other.fails, other.total_guesses)


def test_an_opener_known_to_never_lose_comes_before_the_shortlist(small_setup):
    """The first opener of `complete` whose tree loses none is chosen before the shortlist is
    walked (unknown or losing ones are passed over, each walk stopping at its lost game);
    when all of them lose, the shortlist's best. Every settled game is reported."""
    solver = EntropySolver(small_setup.start, SolverSettings())
    good = solver.opener()
    assert play_tree(solver.choose, small_setup.start, good).fails == 0
    cursed = [w for w in small_setup.lists.allowed[:4] if w != good][:3]
    walked: list[str] = []

    def choose(state):  # after a cursed opener, play it again until the game is lost
        opener = state.turns[0].guess
        if len(state.turns) == 1:
            walked.append(opener)
        return opener if opener in cursed else solver.choose(state)

    root = small_setup.start
    assert best_opener(choose, root, cursed[:2]) in cursed[:2]  # nothing complete: the lesser loss
    settled: dict[str, int] = {}

    def on_settled(opener: str, games: int) -> None:
        settled[opener] = settled.get(opener, 0) + games

    walked.clear()
    assert best_opener(choose, root, cursed[:2], (cursed[1], "qqqqq", cursed[2], good, cursed[0]), on_settled) == good
    assert set(walked) == {cursed[1], cursed[2], good}  # the shortlist is not walked
    assert settled[good] == len(root.candidates) and settled[cursed[1]] < len(root.candidates)
    assert best_opener(choose, root, [good], (cursed[0],)) == good  # every complete one loses


def test_last_guess_is_always_a_candidate(small_setup):
    """With one guess left only a candidate can win, however well other words split."""
    lists = small_setup.lists
    solver = EntropySolver(small_setup.start, SolverSettings(lookahead=True))
    rng = random.Random(3)
    checked = 0
    for secret in rng.sample(lists.answers, 60):
        column = lists.answers.index(secret)
        state = small_setup.start
        for guess in rng.sample([w for w in lists.allowed if w != secret], MAX_GUESSES - 1):
            state = state.play(guess, int(small_setup.matrix[lists.index(guess), column]))
        if len(state.candidates) >= 2:
            assert solver.choose(state) in state.candidate_words()
            checked += 1
    assert checked >= 5


# -- the benchmark targets on the full lists -------------------------------------------

@pytest.mark.slow
def test_greedy_on_all_answers():
    setup = load_setup("answers")
    solver = setup.solver(SolverSettings())
    solver.opener()
    hist, slowest = play_all(solver, setup)
    assert hist[MAX_GUESSES] == 0 and mean_guesses(hist) <= 3.435 and slowest < 3.0


@pytest.mark.slow
def test_lookahead_on_all_answers_within_a_minute():
    start = time.perf_counter()
    setup = load_setup("answers")
    solver = setup.solver(SolverSettings(lookahead=True))
    hist, _ = play_all(solver, setup)
    assert hist[MAX_GUESSES] == 0 and mean_guesses(hist) <= 3.425
    assert time.perf_counter() - start < 60


@pytest.mark.slow
@pytest.mark.parametrize("lookahead, most", [(False, 3.524), (True, 3.512)], ids=["greedy", "lookahead"])
def test_hard_mode_on_all_answers_wins_with_legal_guesses(lookahead, most):
    setup = load_setup("answers")
    hist, _ = play_all(setup.solver(SolverSettings(hard=True, lookahead=lookahead)), setup, hard=True)
    assert hist[MAX_GUESSES] == 0 and mean_guesses(hist) <= most


@pytest.mark.slow
def test_lookahead_on_all_allowed_words():
    """LANTS, the first of the openers known to allow winning every game, loses none (4.0889;
    the shortlist's LARES and TARES lose an _ILLS game each)."""
    setup = load_setup("allowed")
    solver = setup.solver(SolverSettings(lookahead=True))
    tree = play_tree(solver.choose, setup.start, solver.opener())
    assert tree.fails == 0
    assert tree.mean <= 4.09
