"""`eval`: how well the solver (or a model) plays, in one command."""

from __future__ import annotations

import click

from common.errors import UserError, note
from common.options import flag, given_params, json_option, note_unread, refuse_owned_output, seed_option
from eval.endgame import DEFAULT_POSITIONS, KIND
from eval.splits import SPLITS
from llm.histories import ENDGAME_CANDIDATES
from llm.options import model_options, naming_head_option
from solver.options import solver_options, word_list_inputs, word_list_options

# The flags only the solver's play reads, and those only a model's.
SOLVER_FLAGS = ("hard", "lookahead", "top_k")
MODEL_FLAGS = ("model", "adapter", "temperature", "top_p", "max_tokens", "batch_size", "dtype", "naming_head")


@click.command("eval")
@click.option("--policy", type=click.Choice(["solver", "model"]), default=None,
              help="Who plays (default: model if --model is given, else solver).")
@word_list_options()
@click.option("--split", type=click.Choice(list(SPLITS)), default=None,
              help="Secrets from the held-out words (heldout), their validation third that training runs pick "
                   "checkpoints by, the rest of them (test), or the whole list "
                   "(default: all for the solver, heldout for a model); train: the words training uses; "
                   "untaught: those of them SFT data never trains on.")
@click.option("--games", type=click.IntRange(1), default=None, help="Play N secrets sampled with --seed.")
@seed_option
@solver_options
@json_option
@click.option("--compare", nargs=2, type=click.Path(dir_okay=False), default=None,
              help="Show two eval JSON files side by side instead of playing, with the wins paired by secret "
                   "(and a sign test) and each answer rate's change with a 95% bootstrap interval over the "
                   "shared secrets; --json writes the paired figures.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--constrain-guess", is_flag=True,
              help="Decode the model's <guess> tag within the allowed words not yet played: measures its play "
                   "apart from its vocabulary (format-valid is then not the model's own).")
@click.option("--endgame", is_flag=True,
              help="The endgame benchmark instead of whole games: one answer at each of --positions positions "
                   "with 1 to --max-candidates candidates left, from the solver's games on the --split secrets "
                   "(or from --from-games): closing rate by candidates left, repeats, refused words again.")
@click.option("--positions", type=click.IntRange(1, 100_000), default=DEFAULT_POSITIONS, show_default=True,
              help="Endgame positions to answer.")
@click.option("--max-candidates", type=click.IntRange(1, 50), default=ENDGAME_CANDIDATES, show_default=True,
              help="Endgame positions have at most this many candidates left.")
@click.option("--from-games", type=click.Path(dir_okay=False), default=None,
              help="Endgame positions from a model's own eval JSON (every answer it gave at one) instead of the "
                   "solver's games.")
@naming_head_option
@model_options
def eval_command(policy, secrets, answers, allowed, split, games, seed, hard, lookahead, top_k,
                 json_path, compare, quiet, constrain_guess, endgame, positions, max_candidates, from_games,
                 naming_head, model, adapter, temperature, top_p, max_tokens, batch_size, dtype) -> None:
    """Play every secret (or --games N of them) and report win rate, guesses and move quality."""
    from eval.report import compare_endgame, compare_games, load_result, show_endgame, show_result
    from eval.run import EndgameRequest, EvalRequest, ModelSpec, run_endgame, run_eval
    from llm.naming_head import player_head
    from solver.policy import SolverSettings
    from solver.setup import load_setup

    given = given_params(click.get_current_context())
    refuse_owned_output(json_path, "--json", [("--adapter", adapter), ("--model", model)],
                        [("--compare", path) for path in compare or ()] + [("--from-games", from_games)]
                        + word_list_inputs(answers, allowed))
    if compare:
        _refuse_unread(given - {"compare", "json_path", "quiet"}, "--compare shows two results already played")
        a, b = (load_result(p) for p in compare)
        if KIND in (a.get("kind"), b.get("kind")):
            compare_endgame(a, b, compare[0], compare[1], json_path)
        else:
            compare_games(a, b, compare[0], compare[1], json_path)
        return
    if from_games:
        _refuse_unread(given & {"split", "positions"}, "--from-games answers every endgame position of its games")
    from llm.generation import SamplingSettings

    policy = policy or ("model" if model else "solver")
    if policy == "model" and not model:
        raise UserError("--policy model needs --model PATH|default")
    _note_ignored(given, policy)
    if policy == "model" and adapter is None and "naming_head" in given and not player_head(model, None):
        note_unread(["--naming-head" if naming_head else "--no-naming-head"],
                    "without --adapter there is no naming head (naming-head saves one beside an adapter)")
    if constrain_guess and policy != "model":
        raise UserError("--constrain-guess applies to a model (--model PATH|default)")
    spec = ModelSpec(model, adapter, SamplingSettings(temperature, top_p, max_tokens), batch_size,
                     constrain_guess, dtype, naming_head) if policy == "model" else None
    if endgame or from_games:
        if policy != "model" or constrain_guess or games:
            raise UserError("--endgame asks a model (--model PATH|default) for one answer per position; "
                            "--games, --constrain-guess and --policy solver do not apply")
        request = EndgameRequest(split or "heldout", positions, seed, max_candidates, spec, from_games)
        show_endgame(run_endgame(load_setup(secrets, answers, allowed), request, json_path, not quiet))
        return
    settings = SolverSettings(hard=hard, lookahead=lookahead, top_k=top_k) if policy == "solver" else SolverSettings()
    result = run_eval(load_setup(secrets, answers, allowed), EvalRequest(split, games, seed, settings, spec),
                      json_path, not quiet)
    show_result(result)


def _refuse_unread(unread: frozenset[str], reason: str) -> None:
    """One error naming the given flags that `reason` leaves without effect: a flag the user typed
    must not be dropped without a word."""
    if unread:
        shown = ", ".join(sorted(flag(name) for name in unread))
        raise UserError(f"{reason}: {shown} {'does' if len(unread) == 1 else 'do'} not apply; leave "
                        f"{'it' if len(unread) == 1 else 'them'} out")


def _note_ignored(given: frozenset[str], policy: str) -> None:
    """One note naming the given flags that the player does not read (a model plays without the
    solver's --lookahead, the solver without a model's --temperature)."""
    unread, player = (SOLVER_FLAGS, "a model") if policy == "model" else (MODEL_FLAGS, "the solver")
    ignored = [flag(name) for name in unread if name in given]
    if ignored:
        note(f"{', '.join(ignored)} {'has' if len(ignored) == 1 else 'have'} no effect: {player} plays")
