"""How true a model's thoughts were in its eval games: what the thought reward pays for, measured.

The reward's `thought` component pays, for a playable answer, the share of its thought's sentences
that the checker verifies (`sft/cot.check_thought`); an unplayable answer scores the floor whatever
its thought. Turning that credit off in RL should show here first. This reads eval game files
(`eval --json`, with per-game moves), scores every playable answer's thought exactly as the reward
does, and counts, at positions with one candidate left, thoughts that name that word (`Only X
remains.` with X the secret) and thoughts that name an earlier guess instead (the repeat loop).
Each file after the first is paired with the first by secret, with 95% bootstrap intervals:

    python -m studies.thought_truth START.json RL.json [MORE.json ...] [--json OUT]
"""

from __future__ import annotations

import click

from common.errors import run_script
from common.fileio import atomic_write_json, read_json
from eval.endgame import answered_positions
from eval.paired import paired_changes
from llm.format import parse_answer
from sft.cot import check_thought, sentences
from solver.setup import load_setup

FIGURES = ("thought_true_share", "thought_all_true", "one_left_names_secret", "one_left_names_earlier_guess")


def game_counts(games: dict) -> dict[str, dict[str, tuple[float, int]]]:
    """Per secret, each figure as (count, total): summed thought scores over playable answers, thoughts
    wholly true, and at one-candidate positions thoughts naming the secret or an earlier guess."""
    setup = load_setup(games.get("secrets", "answers"))
    counts: dict[str, dict[str, list[float]]] = {}
    for position, move in answered_positions(setup, games):
        state = position.state
        figures = counts.setdefault(position.secret, {name: [0.0, 0] for name in FIGURES})
        parsed = parse_answer(move.get("text", ""), setup.lists, state.guesses)
        if parsed.failure is None:
            check = check_thought(state, parsed.thought, parsed.guess)
            for name, value in (("thought_true_share", check.score), ("thought_all_true", float(check.score == 1.0))):
                figures[name][0] += value
                figures[name][1] += 1
        if len(state.candidates) == 1 and parsed.thought is not None:
            said = set(sentences(parsed.thought))
            named = {f"Only {word} remains." for word in state.guesses}
            figures["one_left_names_secret"][0] += f"Only {position.secret} remains." in said
            figures["one_left_names_earlier_guess"][0] += bool(said & named)
            for name in ("one_left_names_secret", "one_left_names_earlier_guess"):
                figures[name][1] += 1
    return {secret: {name: (value[0], value[1]) for name, value in figures.items()} for secret, figures in counts.items()}


def rates(counts: dict[str, dict[str, tuple[float, int]]]) -> dict:
    """Each figure over all games: the rate and how many answers it counts."""
    out = {}
    for name in FIGURES:
        total = sum(game[name][1] for game in counts.values())
        out[name] = {"rate": round(sum(game[name][0] for game in counts.values()) / total, 4) if total else None,
                     "answers": total}
    return out


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Where the report goes.")
def main(files: tuple[str, ...], json_path: str | None) -> None:
    counts = [game_counts(read_json(path, "eval games file")) for path in files]
    report = {"files": {path: rates(c) for path, c in zip(files, counts)}, "paired_with_first": {}}
    for path in files:
        line = "; ".join(f"{name} {v['rate']} of {v['answers']}" for name, v in report["files"][path].items())
        print(f"{path}: {line}")
    for path, c in zip(files[1:], counts[1:]):
        changes = [change.to_json() for change in paired_changes(counts[0], c, FIGURES)]
        report["paired_with_first"][path] = changes
        print(f"{path} - {files[0]}: " + "; ".join(
            f"{ch['figure']} {ch['difference']} [{ch['low']}, {ch['high']}]" for ch in changes))
    if json_path:
        atomic_write_json(json_path, report)


if __name__ == "__main__":
    run_script(main)
