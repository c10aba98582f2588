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
An interval that holds 0 is a change 32 games cannot tell from dice, whichever way its point
estimate leans: the verdict judges every figure, rise or fall, by its interval alone.
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


DIGITS = 6  # decimals a rate's change keeps (1e-4 points): what the verdict judges and the tables show
MAX_SHOWN_DECIMALS = DIGITS - 2  # in points


@dataclass(frozen=True)
class PairedRate:
    figure: str  # a key of RATE_FIGURES (or of the endgame benchmark's rates)
    games: int  # shared secrets (endgame: positions) that both evals recorded
    difference: float | None  # rate of B - rate of A over those secrets; None where a side has no answers
    low: float | None  # 2.5th and 97.5th percentiles of the resampled difference
    high: float | None

    def to_json(self) -> dict:
        return asdict(self)

    def shown(self) -> str:
        """`+0.02 [+0.00, +0.06]`: the change and its interval in points, with as many decimals as it
        takes (one at least) for no figure that is not 0 to print as 0: the verdict judges an
        interval by which side of 0 its ends lie, and a reader must see the same."""
        values = [100 * v + 0.0 for v in (self.difference, self.low, self.high)]  # + 0.0: no "-0.0"
        decimals = 1
        while decimals < MAX_SHOWN_DECIMALS and any(v and not round(v, decimals) for v in values):
            decimals += 1
        change, low, high = (f"{v:+.{decimals}f}" for v in values)
        return f"{change} [{low}, {high}]"


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
        rates.append(PairedRate(figure, len(shared), round(float(difference[column]), DIGITS),
                                round(float(low), DIGITS), round(float(high), DIGITS)))
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


def rose(change: PairedRate) -> bool:
    """The interval lies above 0: a rise that resampling the shared secrets does not undo."""
    return change.low > 0


def fell(change: PairedRate) -> bool:
    """The interval lies below 0."""
    return change.high < 0


def wrong_way(change: PairedRate) -> bool:
    """A must-rise figure that fell, or a must-not-rise one that rose, by its interval (a point
    estimate on the wrong side with an interval that holds 0 is within noise, not wrong)."""
    return fell(change) if change.figure in MUST_RISE else rose(change)


def unsettled(change: PairedRate) -> bool:
    """A change the verdict cannot count either way: a must-rise figure whose interval holds 0, or
    a must-not-rise one that rose by its point estimate while its interval holds 0."""
    if wrong_way(change):
        return False
    return not rose(change) if change.figure in MUST_RISE else change.difference > 0


@dataclass(frozen=True)
class Verdict:
    """Did B improve on A? The wins first: `wins`, paired by secret with the sign test. Then the
    answer rates, each judged by its 95% interval in both directions: `wrong_way` names the
    figures whose interval lies wholly on the wrong side (a must-rise figure below 0, a
    must-not-rise one above); `within_noise` those whose interval holds 0 where it matters (a
    must-rise figure, or a must-not-rise one whose point estimate rose); `improved`, nothing went
    the wrong way and some must-rise figure rose beyond noise; `beyond_noise`, every one did.
    `changes` holds each figure's PairedRate."""

    judged: bool  # both sides have answers for every figure
    changes: tuple[PairedRate, ...]
    wins: PairedWins | None = None

    @property
    def wrong_way(self) -> tuple[str, ...]:
        return self._labels(wrong_way) if self.judged else ()

    @property
    def within_noise(self) -> tuple[str, ...]:
        """The changes a resample of the shared secrets cannot tell from no change (an interval that holds 0)."""
        return self._labels(unsettled) if self.judged else ()

    @property
    def improved(self) -> bool:
        return (self.judged and not self.wrong_way
                and any(rose(c) for c in self.changes if c.figure in MUST_RISE))

    @property
    def beyond_noise(self) -> bool:
        return self.improved and all(rose(c) for c in self.changes if c.figure in MUST_RISE)

    def _labels(self, test) -> tuple[str, ...]:
        return tuple(VERDICT_LABELS[c.figure] for c in self.changes if test(c))

    def to_json(self) -> dict:
        return {"judged": self.judged, "improved": self.improved, "beyond_noise": self.beyond_noise,
                "wrong_way": list(self.wrong_way), "within_noise": list(self.within_noise),
                "wins": self.wins.to_json() if self.wins else None,
                "changes": [change.to_json() for change in self.changes]}

    def line(self, name_a: str, name_b: str) -> str:
        """One sentence a user reads at the end of a run: the wins' sign test first, then the answer
        rates, naming each figure that is within noise (a change of one of them proves nothing)."""
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
        shown = ", ".join(f"{VERDICT_LABELS[c.figure]} {c.shown()}" for c in self.changes)
        within = self.within_noise
        named = ", ".join(within[:-1]) + " and " + within[-1] if len(within) > 1 else "".join(within)
        held = "" if not within else (f"{named} is within noise (its interval holds 0)" if len(within) == 1 else
                                      f"{named} are within noise (their intervals hold 0)")
        if self.wrong_way:
            return (f"answer rates did not improve (wrong way beyond noise: {', '.join(self.wrong_way)}"
                    f"{'; ' + held if held else ''}): {shown} points")
        if self.beyond_noise:
            return f"answer rates improved beyond noise{' (' + held + ')' if held else ''}: {shown} points"
        if self.improved:
            return f"answer rates improved, but {held}: {shown} points"
        return f"answer rates did not move beyond noise: {held}: {shown} points"


def improvement_verdict(a: dict, b: dict, resamples: int = RESAMPLES, seed: int = 0) -> Verdict:
    """B against A on their shared secrets: the wins paired with the sign test, then format-valid and
    consistency up, invalid words and repeats not up, each judged by its paired bootstrap interval."""
    wins = paired_wins(a, b)
    rates = {rate.figure: rate for rate in paired_rates(a, b, resamples, seed)}
    changes = tuple(rates[f] for f in MUST_RISE + MUST_NOT_RISE if f in rates)
    known = len(changes) == len(MUST_RISE + MUST_NOT_RISE) and all(c.difference is not None for c in changes)
    return Verdict(known, changes, wins)
