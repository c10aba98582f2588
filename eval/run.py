"""Choose secrets, build the player, play, summarise, write JSON: what `eval` does."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError, note
from common.fileio import atomic_write_json
from common.progress import progress_bar
from eval.harness import evaluate, win_figures
from eval.moves import Player, SolverPlayer
from eval.solver_games import SOURCE, shipped_games
from eval.splits import SPLITS, sample_secrets
from solver.policy import SolverSettings
from solver.setup import Setup


@dataclass(frozen=True)
class ModelSpec:
    """Which model plays and how it samples."""

    model: str
    adapter: str | None
    sampling: "SamplingSettings"
    batch_size: int = 32
    constrain_guess: bool = False  # decode the guess tag within the allowed words (not the model's own rate)
    dtype: str = "auto"  # the weights' dtype (llm/loading.py resolve_dtype)
    naming_head: bool = True  # name words by the head beside the adapter (or model folder), when there is one

    @property
    def head(self) -> Path | None:
        """The naming head this model plays with (llm/naming_head.py `player_head`), if any."""
        from llm.naming_head import player_head

        return player_head(self.model, self.adapter) if self.naming_head else None

    @property
    def name(self) -> str:
        name = self.model + (f"+{self.adapter}" if self.adapter else "")
        name += " +naming head" if self.head else ""
        return name + (" (guess constrained)" if self.constrain_guess else "")

    def load(self, allowed: tuple[str, ...], secrets: tuple[str, ...] = ()):
        """(model, tokenizer, steer): the model, and with a naming head the maker of each answer's
        logits processor (llm/word_steering.py), else None."""
        from llm.loading import load_model
        from llm.naming_head import NamingHead
        from llm.word_steering import steered_model

        if self.head and self.constrain_guess:
            raise UserError(f"--constrain-guess decodes the guess its own way, and {self.head} names words "
                            "by the head: add --no-naming-head")
        model, tokenizer = load_model(self.model, self.adapter, self.dtype, fuse=True)
        if not self.head:
            return model, tokenizer, None
        model, steer = steered_model(model, tokenizer, NamingHead.load(self.head), allowed, secrets)
        return model, tokenizer, steer

    def player(self, seed: int, allowed: tuple[str, ...] = (), secrets: tuple[str, ...] = ()) -> Player:
        from llm.player import ModelPlayer

        model, tokenizer, steer = self.load(allowed, secrets)
        return ModelPlayer(model, tokenizer, self.name, self.sampling, seed, self.batch_size,
                           allowed if self.constrain_guess else None, steer)


def choose_secrets(words: tuple[str, ...], split: str, games: int | None, seed: int) -> list[str]:
    pool = SPLITS[split](words)
    if not pool:
        raise UserError(f"the {split} split of this list is empty; use --split all")
    if games is not None and games > len(pool):
        note(f"--games {games}: the {split} split has {len(pool)} secrets; all of them are played")
    return sample_secrets(pool, games, seed)


@dataclass(frozen=True)
class EvalRequest:
    """What `eval` plays: `games` secrets of `split` sampled with `seed` (all of them when None),
    played by `model`, or by the solver with `solver`'s settings when no model is given (who plays
    is the one field `model`, so no request names the model policy without a model)."""

    split: str | None  # None: all for the solver, heldout for a model
    games: int | None
    seed: int
    solver: SolverSettings = SolverSettings()
    model: ModelSpec | None = None


def run_eval(setup: Setup, request: EvalRequest, json_path: str | None, show_progress: bool = True) -> dict:
    """`eval`: the request's player plays its secrets, drawn from `setup`'s lists (loaded by the caller,
    as `solve` loads them); the summary and every game, also written to `json_path` when given."""
    model = request.model
    if model is None:
        split = request.split or "all"
        solver_player = SolverPlayer(setup.solver(request.solver))
        started = time.perf_counter()
        solver_player.policy.load_kernels(show_progress)  # and the opener, computed or read from disk: reported as setup
        setup_seconds = time.perf_counter() - started
        player: Player = solver_player
    else:
        split = request.split or "heldout"
        started = time.perf_counter()
        with progress_bar("steps", disable=not show_progress) as bar:
            bar.add_task(f"setup: loading {model.name}", total=1)
            player = model.player(request.seed, setup.lists.allowed, setup.start.secret_words)
        setup_seconds = time.perf_counter() - started
    secrets = choose_secrets(setup.lists.secrets(setup.secret_kind), split, request.games, request.seed)
    result = play_and_summarise(player, setup, secrets, measure_moves=model is not None,
                                show_progress=show_progress, setup_seconds=setup_seconds)
    result = {"policy": player.name, "secrets": setup.secret_kind, "split": split, "seed": request.seed,
              "hard": request.solver.hard, "guess_constrained": bool(model and model.constrain_guess),
              **(sampling_of(model) if model else {}), **result}
    if model is not None:
        result["solver_same_secrets"] = solver_beside(setup, request.solver, secrets, show_progress)
    if json_path:
        atomic_write_json(json_path, result)
    return result


def solver_beside(setup: Setup, settings: SolverSettings, secrets: list[str], show_progress: bool = False) -> dict:
    """The solver's wins, mean guesses and histogram on a model's secrets, to read the model's beside:
    its shipped games where they hold (eval/solver_games.py: the default lists and settings), else
    played (seconds with the answers list; with the allowed list its proofs take minutes, then
    shown by a progress bar). Where they came from and the seconds it took are recorded."""
    started = time.perf_counter()
    shipped = shipped_games(setup.lists, setup.secret_kind, settings)
    if shipped is not None:
        figures, opener, source = win_figures([shipped.guesses[s] for s in secrets]), shipped.opener, SOURCE
    else:
        player = SolverPlayer(setup.solver(settings))
        player.name = f"{player.name} on the same secrets"
        summary, _ = evaluate(player, setup, secrets, measure_moves=False, show_progress=show_progress)
        figures, opener, source = summary, player.policy.opener(), "played"
    return {**{key: figures[key] for key in ("wins", "mean_guesses", "histogram")}, "opener": opener,
            "source": source, "seconds": round(time.perf_counter() - started, 3)}


def sampling_of(model: ModelSpec) -> dict:
    """How the model's answers were sampled: every model figure depends on it."""
    return {"temperature": model.sampling.temperature, "top_p": model.sampling.top_p,
            "max_tokens": model.sampling.max_tokens, "dtype": model.dtype,
            "naming_head": str(model.head) if model.head else None}


def play_and_summarise(player: Player, setup: Setup, secrets: list[str], measure_moves: bool = True,
                       show_progress: bool = True, setup_seconds: float = 0.0) -> dict:
    """Summary figures plus every game, as written to eval JSON (SFT and RL reuse this)."""
    summary, records = evaluate(player, setup, secrets, measure_moves, show_progress, setup_seconds)
    return {**summary, "per_game": [r.to_json() for r in records]}


def games_file(path: str) -> dict:
    """The eval result of whole games that --from-games draws endgame positions from; refused, saying
    what it takes, when it is an endgame result or anything else without per-game moves."""
    from common.fileio import read_json
    from eval.endgame import KIND

    data = read_json(path, "games file")
    takes = "it takes the games of a whole-game eval, as eval --model M --adapter A --json F writes them"
    if data.get("kind") == KIND:
        raise UserError(f"--from-games {path} is an endgame result (eval --endgame): {takes}")
    if not isinstance(data.get("per_game"), list) or not data["per_game"]:
        raise UserError(f"--from-games {path} is not an eval result of whole games (no per_game list): {takes}")
    return data


@dataclass(frozen=True)
class EndgameRequest:
    """Which endgame positions `model` answers: `count` from the teacher's games on the split's
    secrets, or every such position in a model's own eval games (`from_games`)."""

    split: str
    count: int
    seed: int
    max_candidates: int
    model: ModelSpec
    from_games: str | None = None


def run_endgame(setup: Setup, request: EndgameRequest, json_path: str | None, show_progress: bool = True) -> dict:
    """`eval --endgame`: the model's one answer at each position, summarised (eval/endgame.py)."""
    from eval.endgame import KIND, answer_positions, model_positions, summarise_endgame, teacher_positions

    split = request.split
    if request.from_games:
        games = games_file(request.from_games)
        positions = model_positions(setup, games, request.max_candidates)
        source, split = request.from_games, games.get("split")
    else:
        pool = SPLITS[request.split](setup.lists.secrets(setup.secret_kind))
        if not pool:
            raise UserError(f"the {request.split} split of this list is empty; use --split all")
        positions = teacher_positions(setup, setup.solver().for_histories(), pool, request.count, request.seed,
                                      request.max_candidates)
        source = "teacher"
    if not positions:
        raise UserError(f"no position with 1-{request.max_candidates} candidates left in {source}")
    model = request.model
    loaded, tokenizer, steer = model.load(setup.lists.allowed)
    started = time.perf_counter()
    records = answer_positions(loaded, tokenizer, positions, model.sampling, request.seed, model.batch_size,
                               show_progress, steer and (lambda p: steer(p.state, p.rejected)))
    result = {"kind": KIND, "policy": model.name, "secrets": setup.secret_kind, "split": split,
              "source": source, "seed": request.seed, "max_candidates": request.max_candidates,
              **sampling_of(model), **summarise_endgame(records),
              "seconds": round(time.perf_counter() - started, 3), "per_position": records}
    if json_path:
        atomic_write_json(json_path, result)
    return result
