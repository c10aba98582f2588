"""Two evals on the same secrets, paired: the games only one side won, and whether that could be chance;
how far each per-answer rate moved, with an interval from resampling the secrets.

Win rates of two models on 32-64 games differ by a few games; what tells a real change
from dice is how many secrets one model won and the other lost (the discordant pairs).
Under "no difference" each such secret is equally likely to go either way, so the exact
two-sided sign test (McNemar's exact test) on them gives the chance of a split at least
this uneven.

The per-answer rates (format-valid, consistency, ...) move by a few points between two
batches of the same model, so a change is shown with a 95% paired bootstrap interval: the
shared secrets are drawn with replacement, both models' rates recomputed on the draw (a
rate is a sum of counts over a sum of answers), and the middle 95% of B - A is the interval.
An interval that holds 0 is a change 32 games cannot tell from dice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import comb

import numpy as np

from eval.harness import RATE_FIGURES, MoveRecord, rate_counts

RESAMPLES = 2000


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


@dataclass(frozen=True)
class PairedRate:
    figure: str  # a key of RATE_FIGURES (or of the endgame benchmark's rates)
    games: int  # shared secrets (endgame: positions) that both evals recorded
    difference: float | None  # rate of B - rate of A over those secrets; None where a side has no answers
    low: float | None  # 2.5th and 97.5th percentiles of the resampled difference
    high: float | None

    def to_json(self) -> dict:
        return asdict(self)


def paired_rates(a: dict, b: dict, resamples: int = RESAMPLES, seed: int = 0) -> list[PairedRate]:
    """B - A for every per-answer rate over the secrets both evals played, with a 95% bootstrap interval.

    Deterministic for a seed; games without usable answer records (a JSON saved without
    per_game moves) are left out of every figure."""
    return paired_changes(_game_counts(a), _game_counts(b), RATE_FIGURES, resamples, seed)


def paired_changes(counts_a: dict[str, dict[str, tuple[int, int]]], counts_b: dict[str, dict[str, tuple[int, int]]],
                   figures: tuple[str, ...], resamples: int = RESAMPLES, seed: int = 0) -> list[PairedRate]:
    """B - A for each figure over the units (games, or endgame positions) both sides have, keyed
    alike, each unit's figure a (count, total): the units are drawn with replacement, both
    rates recomputed on the draw, and the middle 95% of B - A is the interval."""
    shared = sorted(counts_a.keys() & counts_b.keys())
    if not shared:
        return []
    # (side, unit, figure, count/total)
    table = np.array([[[counts[s][key] for key in figures] for s in shared] for counts in (counts_a, counts_b)],
                     dtype=np.float64)
    draws = np.random.default_rng(seed).integers(0, len(shared), size=(resamples, len(shared)))
    resampled = table[:, draws].sum(axis=2)  # (side, resample, figure, count/total)
    full = table.sum(axis=1)  # (side, figure, count/total)
    with np.errstate(invalid="ignore", divide="ignore"):
        difference = full[1, :, 0] / full[1, :, 1] - full[0, :, 0] / full[0, :, 1]
        spread = resampled[1, ..., 0] / resampled[1, ..., 1] - resampled[0, ..., 0] / resampled[0, ..., 1]
    rates = []
    for column, figure in enumerate(figures):
        finite = spread[:, column][np.isfinite(spread[:, column])]
        if not np.isfinite(difference[column]) or not finite.size:
            rates.append(PairedRate(figure, len(shared), None, None, None))
            continue
        low, high = np.percentile(finite, [2.5, 97.5])
        rates.append(PairedRate(figure, len(shared), round(float(difference[column]), 4),
                                round(float(low), 4), round(float(high), 4)))
    return rates


def _game_counts(result: dict) -> dict[str, dict[str, tuple[int, int]]]:
    """Each game's rate counts by secret, rebuilt from its recorded moves (games without them are skipped)."""
    counts = {}
    for game in result.get("per_game", []):
        moves = _moves(game.get("moves"))
        if moves is not None:
            counts[game["secret"]] = rate_counts(moves)
    return counts


def _moves(records) -> list[MoveRecord] | None:
    """The MoveRecords of one game's JSON moves, or None if they are not a list of such records."""
    if not isinstance(records, list):
        return None
    moves = []
    for record in records:
        if not isinstance(record, dict):
            return None
        try:
            move = MoveRecord(**record)
        except TypeError:
            return None
        if not (move.guess is None or isinstance(move.guess, str)) or not (
                move.failure is None or isinstance(move.failure, str)):
            return None
        moves.append(move)
    return moves


# Whether B plays better than A without trading one failure for another (the RL-learning issue's
# test of an RL stage against its SFT start): these rates must rise, and those must not.
MUST_RISE = ("format_valid_rate", "consistency_rate")
MUST_NOT_RISE = ("invalid_word_rate", "repeat_rate")
VERDICT_LABELS = {"format_valid_rate": "format-valid", "consistency_rate": "consistency",
                  "invalid_word_rate": "invalid-word", "repeat_rate": "repeat"}


CHANCE = 0.05  # a sign test's p below this is a split of discordant wins that dice rarely give


@dataclass(frozen=True)
class Verdict:
    """Did B improve on A? The wins first: `wins`, paired by secret with the sign test. Then the
    answer rates: `improved`, every figure of MUST_RISE rose and none of MUST_NOT_RISE did (point
    estimates); `beyond_noise`, also every rise's interval lies above 0 (`within_noise` names those
    whose interval holds 0). `wrong_way` names the figures that moved against it; `changes` holds
    each figure's PairedRate."""

    judged: bool  # both sides have answers for every figure
    beyond_noise: bool
    wrong_way: tuple[str, ...]
    changes: tuple[PairedRate, ...]
    wins: PairedWins | None = None

    @property
    def improved(self) -> bool:
        return self.judged and not self.wrong_way

    @property
    def within_noise(self) -> tuple[str, ...]:
        """The rises a resample of the shared secrets cannot tell from no change (an interval that holds 0)."""
        if not self.improved:
            return ()
        return tuple(VERDICT_LABELS[c.figure] for c in self.changes if c.figure in MUST_RISE and c.low <= 0)

    def to_json(self) -> dict:
        return {"judged": self.judged, "improved": self.improved, "beyond_noise": self.beyond_noise,
                "wrong_way": list(self.wrong_way), "within_noise": list(self.within_noise),
                "wins": self.wins.to_json() if self.wins else None,
                "changes": [change.to_json() for change in self.changes]}

    def line(self, name_a: str, name_b: str) -> str:
        """One sentence a user reads at the end of a run: the wins' sign test first, then the answer
        rates, naming each figure that is within noise (a rise of one of them proves nothing)."""
        return f"{self._wins_part(name_a, name_b)}; {self._rates_part()}"

    def _wins_part(self, name_a: str, name_b: str) -> str:
        wins = self.wins
        if wins is None or not wins.games:
            return f"{name_b} vs {name_a}: no shared secret to pair the wins on"
        chance = "beyond chance" if wins.p_value < CHANCE else "within chance"
        return (f"{name_b} vs {name_a} on {wins.games} shared secrets: wins {wins.wins_a} -> {wins.wins_b}, "
                f"{wins.only_b} won by {name_b} only and {wins.only_a} by {name_a} only (sign test p = "
                f"{wins.p_value:.2g}: {chance} at {CHANCE:.0%})")

    def _rates_part(self) -> str:
        if not self.judged:
            return "answer rates not judged (a figure has no answers on one side)"
        shown = ", ".join(f"{VERDICT_LABELS[c.figure]} {100 * c.difference:+.1f} [{100 * c.low:+.1f}, "
                          f"{100 * c.high:+.1f}]" for c in self.changes)
        if not self.improved:
            return f"answer rates did not improve (wrong way: {', '.join(self.wrong_way)}): {shown} points"
        if self.beyond_noise:
            return f"answer rates improved beyond noise: {shown} points"
        within = self.within_noise
        held = "is within noise (its interval holds 0)" if len(within) == 1 else \
            "are within noise (their intervals hold 0)"
        return f"answer rates improved, but {' and '.join(within)} {held}: {shown} points"


def improvement_verdict(a: dict, b: dict, resamples: int = RESAMPLES, seed: int = 0) -> Verdict:
    """B against A on their shared secrets: the wins paired with the sign test, then format-valid and
    consistency up, invalid words and repeats not up, judged on the paired rates (the bootstrap intervals)."""
    wins = paired_wins(a, b)
    rates = {rate.figure: rate for rate in paired_rates(a, b, resamples, seed)}
    changes = tuple(rates[f] for f in MUST_RISE + MUST_NOT_RISE if f in rates)
    known = len(changes) == len(MUST_RISE + MUST_NOT_RISE) and all(c.difference is not None for c in changes)
    if not known:
        return Verdict(False, False, (), changes, wins)
    wrong = tuple(VERDICT_LABELS[c.figure] for c in changes
                  if (c.figure in MUST_RISE and c.difference <= 0) or (c.figure in MUST_NOT_RISE and c.difference > 0))
    beyond = not wrong and all(c.low > 0 for c in changes if c.figure in MUST_RISE)
    return Verdict(True, beyond, wrong, changes, wins)
