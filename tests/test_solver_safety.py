"""The solver never loses a game it can win: the proof search against a plain recursion,
and the games that used to be lost, replayed from where they went wrong."""

from __future__ import annotations

import random

import numpy as np
import pytest

from solver.feedback import WIN, parse_pattern
from solver.lookahead import tighten
from solver.opener import COMPLETE_OPENERS
from solver.policy import EntropySolver, SolverSettings, _hard_arrays
from solver.safety import NONE_FINISHES, finishing_guess
from solver.setup import Setup, load_setup
from solver.state import GameState
from tests.test_solver_strength import hard_legal


@pytest.fixture(scope="module")
def small_setup(small_lists_files) -> Setup:
    return load_setup("answers", str(small_lists_files[0]), str(small_lists_files[1]))


@pytest.fixture(scope="module")
def answers_setup() -> Setup:
    return load_setup("answers")


def reference_finishes(setup, pool, cands, left, hard, greens, mins, first_rows=None) -> bool:
    """Some guess (pool then candidates, legal in hard mode) wins every candidate within
    `left` guesses: the obvious recursion, no shortcuts."""
    if len(cands) == 0:
        return True
    if left == 0:
        return False
    rows = list(pool) + list(setup.lists.answer_rows[cands]) if first_rows is None else first_rows
    codes = setup.lists.allowed_codes
    for row in rows:
        word = codes[row]
        if hard and not (all(greens[p] < 0 or word[p] == greens[p] for p in range(5))
                         and all(np.bincount(word, minlength=26) >= mins)):
            continue
        patterns = setup.matrix[row][cands]
        ok = True
        for pattern in np.unique(patterns):
            if pattern == WIN:
                continue
            sub_greens, sub_mins = tighten(codes[row], pattern, greens, mins) if hard else (greens, mins)
            if not reference_finishes(setup, pool, cands[patterns == pattern], left - 1, hard, sub_greens, sub_mins):
                ok = False
                break
        if ok:
            return True
    return False


@pytest.mark.parametrize("hard", [False, True])
def test_proof_search_matches_the_plain_recursion(small_setup, hard):
    lists, rng = small_setup.lists, random.Random(11)
    solver = EntropySolver(small_setup.start, SolverSettings(hard=hard))
    verdicts = set()
    while len(verdicts) < 2 or rng.random() < 0.9:
        secret = rng.randrange(len(lists.answers))
        state = small_setup.start
        for guess in rng.sample(lists.answers, 2):
            state = state.play(guess, int(small_setup.matrix[lists.index(guess), secret]))
        if not 4 <= len(state.candidates) <= 30:
            continue
        pool = np.array(rng.sample(range(len(lists.allowed)), 12), dtype=np.int64)
        greens, mins = _hard_arrays(state)
        game = (small_setup.matrix, lists.allowed_codes, solver._letter_counts, lists.answer_rows, pool)
        first = solver._legal_rows(state)[:: max(1, len(lists.allowed) // 40)]
        for left in (2, 3):
            got = finishing_guess(game, first, state.candidates, left, hard, greens, mins)
            want = next((int(r) for r in first if reference_finishes(
                small_setup, pool, state.candidates, left, hard, greens, mins, [r])), NONE_FINISHES)
            assert got == want
            verdicts.add(got >= 0)


# The games the solver used to lose on the 2,315 answers in hard mode (SALET first), replayed
# from the opener's feedback: every line now ends in a win, with legal guesses only.
HARD_LOSSES = {"foyer": "salet:00020", "pound": "salet:00000", "watch": "salet:02001",
               "wight": "salet:00002", "wound": "salet:00000"}


@pytest.mark.parametrize("lookahead", [False, True], ids=["greedy", "lookahead"])
def test_hard_mode_wins_the_games_it_used_to_lose(answers_setup, lookahead):
    solver = answers_setup.solver(SolverSettings(hard=True, lookahead=lookahead))
    lists = answers_setup.lists
    for secret, opened in HARD_LOSSES.items():
        guess, tiles = opened.split(":")
        state: GameState = answers_setup.start.play(guess, parse_pattern(tiles))
        column = lists.answers.index(secret)
        while not state.over:
            guess = solver.choose(state)
            assert hard_legal(guess, state.turns), (secret, state.guesses, guess)
            state = state.play(guess, int(answers_setup.matrix[lists.index(guess), column]))
        assert state.won, (secret, state.guesses)


@pytest.fixture(scope="module")
def allowed_setup() -> Setup:
    return load_setup("allowed")


# Games the greedy solver used to lose with the 12,972 allowed words as secrets (LARES first),
# replayed from the opener's feedback: proving from 5 guesses left (ALLOWED_SAFE_FROM) wins them.
# The _IVES family takes a few seconds; ZESTS proves a larger position (about 10 s more).
ALLOWED_LOSSES = [("lares:00022", ("hives", "jives", "wives")),
                  pytest.param("lares:00012", ("zests",), marks=pytest.mark.slow)]


@pytest.mark.parametrize("opened, secrets", ALLOWED_LOSSES, ids=["ives", "zests"])
def test_allowed_secrets_win_the_games_greedy_used_to_lose(allowed_setup, opened, secrets):
    solver = allowed_setup.solver(SolverSettings())
    lists = allowed_setup.lists
    guess, tiles = opened.split(":")
    for secret in secrets:
        state: GameState = allowed_setup.start.play(guess, parse_pattern(tiles))
        column = lists.index(secret)
        while not state.over:
            move = solver.choose(state)
            state = state.play(move, int(allowed_setup.matrix[lists.index(move), column]))
        assert state.won, (secret, state.guesses)


def test_a_position_proven_from_above_is_won_by_the_moves_played(allowed_setup):
    """After LANTS 10002 FIBER 02000 (29 secrets, 4 guesses left) the check one turn up had
    proven a line, but the lookahead played one its own rivals could not prove and lost
    VILLS and ZILLS: the move played must come from the moves a proof counts on."""
    solver = allowed_setup.solver(SolverSettings(lookahead=True))
    lists = allowed_setup.lists
    position = allowed_setup.start.play("lants", parse_pattern("10002")).play("fiber", parse_pattern("02000"))
    assert {"vills", "zills"} <= {lists.allowed[c] for c in position.candidates}
    for column in position.candidates:
        state = position
        while not state.over:
            move = solver.choose(state)
            state = state.play(move, int(allowed_setup.matrix[lists.index(move), column]))
        assert state.won, (lists.allowed[column], state.guesses)


@pytest.mark.slow
def test_lookahead_after_a_complete_opener_wins_the_ills_words(allowed_setup):
    """The lookahead's allowed-list losses (ZILLS after LARES, JILLS after SALET or LANTS)
    are won after LANTS, the first of COMPLETE_OPENERS, which opener choice falls back to
    (at LANTS 10002 only a move from the far end of the pool proves: minutes of search)."""
    solver = allowed_setup.solver(SolverSettings(lookahead=True))
    lists = allowed_setup.lists
    for secret in ("zills", "jills", "vills", "wills"):
        column = lists.index(secret)
        state: GameState = allowed_setup.start
        while not state.over:
            move = solver.choose(state) if state.turns else COMPLETE_OPENERS[0]
            state = state.play(move, int(allowed_setup.matrix[lists.index(move), column]))
        assert state.won, (secret, state.guesses)
