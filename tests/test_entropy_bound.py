"""The letter bound never undercuts a guess's entropy, and the pruned search finds exactly
what scoring every guess finds: the best entropy and every guess tied at it."""

from __future__ import annotations

import numpy as np
import pytest

from solver.entropy import score_guesses
from solver.entropy_bound import PRUNE_FROM, EntropyBound
from solver.policy import ENDGAME_TURNS, SolverSettings
from solver.setup import Setup, load_setup
from solver.state import GameState


@pytest.fixture(scope="module")
def setup() -> Setup:
    return load_setup("answers")


@pytest.fixture(scope="module")
def bound(setup: Setup) -> EntropyBound:
    return EntropyBound(setup.lists.allowed_codes, setup.lists.answer_codes)


def sampled_states(setup: Setup, count: int, seed: int) -> list[GameState]:
    """Positions after 1-3 random guesses against random secrets, a few from every size."""
    rng = np.random.default_rng(seed)
    states = []
    while len(states) < count:
        column = int(rng.integers(setup.matrix.shape[1]))
        state = setup.start
        for _ in range(int(rng.integers(1, 4))):
            row = int(rng.integers(setup.matrix.shape[0]))
            state = state.play(setup.lists.allowed[row], int(setup.matrix[row, column]))
        if len(state.candidates) >= 2:
            states.append(state)
    return states


def test_bound_is_never_below_the_entropy(setup, bound):
    rows = np.arange(len(setup.lists.allowed), dtype=np.int64)
    repeated = np.array([len(set(word)) < 5 for word in setup.lists.allowed])
    for state in sampled_states(setup, 30, seed=1) + [setup.start]:
        entropy, _ = score_guesses(setup.matrix, rows, state.candidates)
        bounds = bound.bounds(rows, state.candidates)
        assert (bounds >= entropy - 1e-9).all()
        assert (bounds[repeated] >= entropy[repeated] - 1e-9).all() and repeated.sum() > 4000


def test_bound_leaves_few_guesses_to_score_in_large_positions(setup, bound):
    """What makes the search fast: with 100+ candidates, under a tenth of the guesses
    have a bound that reaches the best entropy."""
    rows = np.arange(len(setup.lists.allowed), dtype=np.int64)
    large = [s for s in sampled_states(setup, 60, seed=5) if len(s.candidates) >= 100][:10]
    assert len(large) >= 5
    for state in large:
        _, best = bound.most_informative(setup.matrix, rows, state.candidates)
        assert (bound.bounds(rows, state.candidates) >= best).mean() < 0.1


@pytest.mark.parametrize("seed", [2, 3])
def test_search_matches_scoring_every_guess(setup, bound, seed):
    rng = np.random.default_rng(seed)
    all_rows = np.arange(len(setup.lists.allowed), dtype=np.int64)
    sizes = []
    for state in sampled_states(setup, 40, seed) + [setup.start]:
        # all guesses, and a random subset in list order (as hard mode passes its legal rows)
        subset = np.sort(rng.choice(all_rows, size=3000, replace=False))
        for rows in (all_rows, subset):
            entropy, _ = score_guesses(setup.matrix, rows, state.candidates)
            tied, best = bound.most_informative(setup.matrix, rows, state.candidates)
            assert best == entropy.max()
            np.testing.assert_array_equal(tied, rows[entropy == entropy.max()])
        sizes.append(len(state.candidates))
    assert min(sizes) < PRUNE_FROM <= 100 < max(sizes)  # both paths were taken


def test_greedy_choice_is_the_top_of_the_full_ranking(setup):
    """The solver's greedy move (before any proof that it finishes in time may replace it)
    equals the first guess of its full entropy ranking (ties to possible answers, then list
    order), in normal and hard mode."""
    for hard in (False, True):
        solver = setup.solver(SolverSettings(hard=hard))
        for state in sampled_states(setup, 25, seed=4):
            if state.guesses_left > ENDGAME_TURNS:
                assert setup.lists.allowed[solver._greedy_row(state)] == solver.rank(state, 1)[0].word


def test_loading_kernels_leaves_the_memo_empty(setup):
    """gen-sft loads the compiled kernels before its clock starts; the timed solver's memo
    must not gain from it."""
    solver = setup.solver()
    solver.opener()  # computed once per cache (it plays with this solver), as gen-sft does first
    before = {name: len(table) for name, table in solver.memo_tables().items()}
    solver.load_kernels()
    assert {name: len(table) for name, table in solver.memo_tables().items()} == before
