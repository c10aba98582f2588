"""`play`: watch a model play one secret, or ask it for the next guess of your own game."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from common.errors import UserError, note
from common.options import given_params, json_option, refuse_owned_output, seed_option
from llm.options import naming_head_option, one_answer_model_options
from solver.options import word_list_inputs, word_list_options

if TYPE_CHECKING:
    from eval.run import ModelSpec
    from solver.setup import Setup


@click.command("play")
@click.option("--word", default=None, help="Secret for the model to play: each answer is shown as it is played.")
@click.option("--history", default=None,
              help='Feedback so far, e.g. "salet:20100,crony:10200" (or gybbb letters): the model suggests '
                   "the next guess. Without --word and --history: an interactive game, as `solve` runs one.")
@click.option("--game", type=click.IntRange(0, 1_000_000), default=0, show_default=True,
              help="With --word: draw the answers eval draws for its game N with this --seed (its per_game[N]), "
                   "so a game of an eval JSON can be watched again.")
@word_list_options()
@seed_option
@json_option
@naming_head_option
@one_answer_model_options
def play_command(word, history, game, secrets, answers, allowed, seed, json_path, naming_head, model, adapter,
                 temperature, top_p, max_tokens, dtype) -> None:
    """A model plays --word (its thoughts, the tiles and the solver's move beside each turn), or
    suggests your next guess after --history, or in a game you type in."""
    from eval.run import ModelSpec
    from llm.generation import SamplingSettings
    from solver.setup import load_setup

    given = given_params(click.get_current_context())
    refuse_owned_output(json_path, "--json", [("--adapter", adapter), ("--model", model)],
                        word_list_inputs(answers, allowed))
    if not model:
        raise UserError("play needs the model that plays: --model PATH|default")
    if word is not None and history is not None:
        raise UserError("use either --word (the model plays) or --history (it suggests your next guess), not both")
    if word is not None and not word.strip():
        raise UserError("--word is empty: give the secret for the model to play, e.g. --word crane")
    if "game" in given and word is None:
        note("--game has no effect without --word: a suggestion is the model's first answers at that position")
    if json_path and word is None and history is None:
        note("--json has no effect in an interactive game")
    setup = load_setup(secrets, answers, allowed)
    spec = ModelSpec(model, adapter, SamplingSettings(temperature, top_p, max_tokens), dtype=dtype,
                     naming_head=naming_head)
    if word is not None:
        _watch(setup, spec, word.strip().lower(), seed, game, json_path)
    else:
        _suggest(setup, spec, history, seed, json_path)


def _watch(setup: Setup, spec: ModelSpec, word: str, seed: int, game: int, json_path: str | None) -> None:
    """The model plays `word`, each answer shown as it is played; the game record to `json_path`."""
    from common.fileio import atomic_write_json
    from eval.play import head_line, model_player, play_secret_game
    from eval.play_views import PlayView, outcome_line
    from eval.run import sampling_of
    from solver.solve_views import secret_column

    secret_column(setup, word)
    player = model_player(setup, spec, seed)  # a model that does not load is the one line, before any output
    view = PlayView()
    view.line(f"{spec.name} plays {word.upper()} (seed {seed}, temperature {spec.sampling.temperature}, "
              f"eval's game {game}); {head_line(spec)}")
    with view.thinking():
        record, shown = play_secret_game(setup, player, word, game, view.answer)
    view.line(outcome_line(record))
    if json_path:
        atomic_write_json(json_path, {"policy": spec.name, "secrets": setup.secret_kind, "seed": seed,
                                      **sampling_of(spec), "game_number": game, "game": record.to_json(),
                                      "answers": [answer.to_json() for answer in shown]})


def _suggest(setup: Setup, spec: ModelSpec, history: str | None, seed: int, json_path: str | None) -> None:
    """The model's next guess after `history`, or at each position of a game typed in when None."""
    from common.fileio import atomic_write_json
    from eval.play import ModelAdviser, head_line, model_player
    from eval.play_views import PlayView
    from eval.run import sampling_of
    from solver.solve_views import assist, parse_history, require_stdin
    from solver.state import GameState, state_from_history

    if history is None:
        require_stdin()
    else:
        state = state_from_history(setup.lists, setup.matrix, parse_history(history), setup.secret_kind)
    adviser = ModelAdviser(setup, model_player(setup, spec, seed))
    view = PlayView()
    view.line(f"{spec.name} suggests (seed {seed}, temperature {spec.sampling.temperature}); {head_line(spec)}")
    if history is None:
        def advise(position: GameState) -> dict:
            with view.thinking():
                return adviser(position)

        assist(setup, advise, view.advice)
        return
    with view.thinking():
        advice = adviser(state)
    view.advice(view.console, state, advice)
    if json_path:
        atomic_write_json(json_path, {"policy": spec.name, "secrets": setup.secret_kind, "seed": seed,
                                      **sampling_of(spec), **advice,
                                      "answers": [answer.to_json() for answer in advice["answers"]]})
