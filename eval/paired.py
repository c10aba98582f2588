"""Two evals on the same secrets, paired: the games only one side won, and whether that could be chance.

Win rates of two models on 32-64 games differ by a few games; what tells a real change
from dice is how many secrets one model won and the other lost (the discordant pairs).
Under "no difference" each such secret is equally likely to go either way, so the exact
two-sided sign test (McNemar's exact test) on them gives the chance of a split at least
this uneven.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import comb


@dataclass(frozen=True)
class PairedWins:
    games: int  # secrets both evals played
    wins_a: int
    wins_b: int
    only_a: int  # secrets won by A and lost by B
    only_b: int
    p_value: float  # exact two-sided sign test on only_a vs only_b (1.0 when no secret differs)

    def to_json(self) -> dict:
        return asdict(self)


def paired_wins(a: dict, b: dict) -> PairedWins:
    """The paired win figures of two eval results (their per_game records, matched by secret)."""
    won_a = {g["secret"]: g["won"] for g in a.get("per_game", [])}
    won_b = {g["secret"]: g["won"] for g in b.get("per_game", [])}
    shared = sorted(won_a.keys() & won_b.keys())
    only_a = sum(won_a[s] and not won_b[s] for s in shared)
    only_b = sum(won_b[s] and not won_a[s] for s in shared)
    return PairedWins(len(shared), sum(won_a[s] for s in shared), sum(won_b[s] for s in shared),
                      only_a, only_b, sign_test_p(only_a, only_b))


def sign_test_p(only_a: int, only_b: int) -> float:
    """Exact two-sided p-value of a split `only_a`:`only_b` of discordant pairs when each way is a coin flip."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)
