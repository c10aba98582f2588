"""The whole recipe in one call: gen-sft -> sft -> rl (+ naming head) -> eval of base, SFT and RL.

SFT from scratch takes hours on a CPU (2,400 steps of 16), so on a CPU with the default model
the SFT stage is the bundled start (llm/bundled_start.py, the GPU recipe's SFT adapter) and the
RL stage is the part that runs: a naming head fitted on it, then head RL (rl/head_loop.py), the
RL model compared with its SFT start, and the start with its fitted head, on the same held-out
test secrets. `--sft-start scratch` runs the small from-scratch demo instead (gen-sft, LoRA SFT,
LoRA RL); `--sft-start DIR` starts from any SFT adapter folder.

Each stage calls the same code as its command and records its summary in
`OUT/stages.json` when it finishes. Running the pipeline again skips finished stages
and resumes an interrupted SFT or RL run from its last checkpoint, so a crash costs
at most one checkpoint interval.

The comparison plays the held-out test words, which nothing chooses by, at eval's
temperature: the same secrets and seed for the three models. With `rl_eval_every`
> 0, RL also plays held-out validation games before it trains and every so many
steps, and the best of those policies (RL/best) is the one compared; the default
leaves that off, because on a 2-core CPU 16 such games take 3-4 minutes and the
pipeline's RL stage 17-24 (results/rl-replay/).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.table import Table

from common.errors import UserError
from common.fileio import atomic_write_json, read_json
from common.knobs import Declared, check_knobs, knob, knob_field, knobs_of
from common.options import flag, note_unread
from eval.paired import improvement_verdict
from eval.report import FIGURES
from llm import distributed
from llm.bundled_start import verified_start
from llm.generation import SamplingSettings
from rl.config import KNOBS, RLConfig, build_config
from rl.naming_head import HeadSettings
from sft.config import KNOBS as SFT_KNOBS
from sft.gen_data import GenSettings
from sft.run_folder import claim, refuse_changes

STAGES_FILE = "stages.json"
MODELS = ("base", "sft", "rl")
START_HEAD_MODEL = "sft-head"  # from an SFT start (unless --no-eval-start-head): the start with its fitted head alone
RECIPES = ("auto", "cpu", "gpu")
SFT_STARTS = ("auto", "bundled", "scratch")  # or an adapter folder
# The main job on a GPU (CUDA or Metal): the SFT of ../shared/adapters/gpu-sft-2400 (2,400 steps of
# 16 on 10,000 solver games, 28-33 of 128 held-out wins; 8.5 minutes on an H100 as mlx ran it
# then), then endgame RL (results/endgame-rl/) with groups of 16 and RL/best chosen by the held-out
# endgame closing rate, and 128 test games per model. The CPU defaults are a 35-minute demo.
GPU_RECIPE = {"sft_games": 10_000, "expert": "solver", "sft_iters": 2400, "sft_batch": 16, "sft_rank": 16,
              "sft_lr": 5e-4, "rl_steps": 40, "rl_schedule": "grpo:1", "group_size": 16, "rl_games": 32,
              "grpo_groups": 32, "rl_start": "endgame", "rl_turns": 1, "rl_eval_every": 4, "rl_eval_endgame": 256,
              "eval_games": 128, "naming_head": HeadSettings().positions, "sft_start": "scratch"}


def recipe_for(name: str, device=None) -> dict:
    """The settings a recipe changes from PipelineSettings' CPU defaults; `auto` follows the device."""
    import mlx.core as mx

    if name == "auto":
        name = "gpu" if (device or mx.default_device()).type == mx.gpu else "cpu"
    return dict(GPU_RECIPE) if name == "gpu" else {}


GEN_KNOBS = knobs_of(GenSettings)
RL_KEY = "rl_key"  # the metadata key of a pipeline setting that is an RL knob


def stage_knob(entry: Declared, default: Any, flag: str | None = None, help: str | None = None,
               **metadata: Any) -> Any:
    """A pipeline setting that is a stage's knob `entry` under the pipeline's own name and default: the
    knob's type, range and choices, its help unless `help`, and `flag` where the pipeline has an option."""
    return knob_field(default, replace(entry.knob, flag=flag, help=help or entry.knob.help), **metadata)


def rl_knob(key: str, default: Any, flag: str | None = None, help: str | None = None) -> Any:
    """The RL knob `key` (rl/config.py KNOBS) as a pipeline setting (`stage_knob`): `rl_config` passes it on."""
    return stage_knob(KNOBS[key], default, flag, help, **{RL_KEY: key})


@dataclass(frozen=True)
class PipelineSettings:
    """The CPU defaults: from the bundled SFT start, 36 to 60 minutes on a 2-core CPU with the default model
    (results/pipeline-kill-resume/, results/pipeline-cpu-start/)."""

    model: str = "default"
    # Every stage's seed. 1, not 0: test seed 0's games chose among naming-head variants
    # (results/head-scale/), so a claim about test wins is made on another seed.
    seed: int = rl_knob("seed", 1, "--seed")
    sft_games: int = stage_knob(GEN_KNOBS["games"], 300, "--sft-games")
    # The teacher of SFT data and expert iteration (solver/policy.py EXPERTS): its best word among
    # those that can still be the secret gave the stronger SFT start (format-valid 58.7% against
    # 31.4% on the same 32 test secrets, results/pipeline-candidates/).
    expert: str = rl_knob("ei.expert", "candidates", "--expert",
                          help="The teacher of SFT data and expert iteration: the solver's moves, or its best "
                               "possible answer.")
    max_history: int = stage_knob(GEN_KNOBS["max_history"], 3)
    sft_iters: int = stage_knob(SFT_KNOBS["iters"], 40, "--sft-iters", help="LoRA SFT steps.")
    sft_lr: float = stage_knob(SFT_KNOBS["learning_rate"], 5e-4)
    sft_batch: int = stage_knob(SFT_KNOBS["batch_size"], 4)
    sft_rank: int = stage_knob(SFT_KNOBS["rank"], 8)
    rl_steps: int = rl_knob("steps", 4, "--rl-steps")
    rl_schedule: str = rl_knob("schedule", "ei:3,grpo:1", "--rl-schedule")
    group_size: int = rl_knob("rollout.group_size", 4, "--group-size")
    rl_games: int = rl_knob("rollout.games_per_round", 2)
    rl_eval_games: int = rl_knob("eval_games", 16)  # validation games RL plays to choose its best policy
    rl_eval_every: int = rl_knob("eval_every", 0)  # 0: no validation evals, RL's last policy is compared
    rl_start: str = rl_knob("rollout.start", "any", "--rl-start")  # "endgame" starts where 1-6 candidates are left
    rl_turns: int = rl_knob("rollout.turns", 0, "--rl-turns")  # groups per RL game: 0 to the end, 1 single-turn
    # validation endgame positions per RL eval; > 0 chooses RL/best by their closing rate
    rl_eval_endgame: int = rl_knob("eval_endgame", 0)
    ei_lr: float = rl_knob("ei.learning_rate", 3e-4)
    # with the replayed demonstrations, about every target once (results/rl-replay/)
    ei_sft_steps: int = rl_knob("ei.sft_steps", 8)
    # games the model plays per expert-iteration step; every position they reach is taught
    ei_games: int = rl_knob("ei.games_per_step", 4)
    ei_samples: int = rl_knob("ei.samples", 2)  # answers sampled per position (one advances the game)
    # The expert's moves at fresh start states added to each expert-iteration step: without them
    # the updates unlearned the opener (13 of 32 playable, SFT 26; results/rl-replay/).
    ei_replay: int = rl_knob("ei.replay", 16, "--ei-replay")
    # The expert's moves at the positions after its opener that most training secrets lead to,
    # taught at every expert-iteration step (0: none; results/rl-drill/).
    ei_drill: int = rl_knob("ei.drill", 0, "--ei-drill")
    ei_drill_depth: int = rl_knob("ei.drill_depth", 1, "--ei-drill-depth")  # after each of the expert's first N moves
    grpo_lr: float = rl_knob("grpo.learning_rate", 1e-4)
    grpo_groups: int = rl_knob("grpo.groups_per_step", 4)  # informative groups per GRPO step, from one round
    # 64: the fewest held-out games a win-rate claim is read from here (a sign test over their pairs).
    eval_games: int = knob(64, "Held-out games per model.", range=(1, None), flag="--eval-games")  # test games
    # The naming head fitted on RL's chosen adapter (rl/naming_head.py), which its eval then plays
    # with: from the GPU SFT adapter it won 61 of 128 held-out games where the adapter won 33
    # (results/naming-head/). Its states cost about 0.5 s a position on a 2-core CPU.
    naming_head: int = knob(0, "Training positions of a naming head fitted on RL's chosen adapter, which the RL "
                               "model then plays with (0: none).", range=(0, 1_000_000), flag="--naming-head")
    # Where SFT comes from: auto is the bundled start for the default model (SFT from scratch takes
    # hours on a CPU), SFT from scratch for any other; or an SFT adapter folder.
    sft_start: str = knob("auto", "The SFT stage: auto (the bundled SFT start for the default model, from scratch "
                                  "for others), bundled, scratch (gen-sft + LoRA SFT), or an SFT adapter folder to "
                                  "start from.", flag="--sft-start")
    # From an SFT start, RL trains a naming head fitted on it (rl/head_loop.py).
    start_head: int = knob(640, "From an SFT start: training positions of the naming head fitted on it, which head "
                                "RL then trains (each costs one model pass, about 0.5 s on 2 cores).",
                           range=(1, 1_000_000), flag="--start-head")
    head_rl_steps: int = rl_knob("steps", 200, "--head-rl-steps",
                                 help="From an SFT start: head RL steps (each a few seconds; the games come first).")
    head_games: int = rl_knob("head.games", 32, "--head-games")
    # The head fit alone won 57 of 128 where the same head after head RL won 62 (results/head-gains/):
    # without this row the table credits RL with the fit's lift.
    eval_start_head: bool = knob(True, "From an SFT start: also play the start with its fitted head alone, to tell "
                                       "the head's lift from head RL's (one more eval).", flag="--eval-start-head")
    head_eval_every: int = rl_knob("eval_every", 20, help="From an SFT start: steps between the head's held-out "
                                                          "validation figures (its best is the RL model).")
    max_tokens: int = rl_knob("rollout.max_tokens", 160)  # the longest solver answer is ~130 tokens
    dtype: str = rl_knob("dtype", "auto", "--dtype")  # the weights' dtype in every stage (llm/loading.py)

    def check(self) -> None:
        """Every stage's settings, before the first stage runs: a bad --group-size must not cost a
        gen-sft and an SFT run. Each is checked as its stage's knob, and the RL config as a whole."""
        check_knobs(self, NAMES)
        self.rl_config()
        self.head_rl_config()
        start = self.resolved_start
        if start == "bundled" and self.model != "default":
            raise UserError(f"--sft-start bundled is the default model's SFT start, not {self.model}'s: give "
                            "--sft-start scratch or an adapter folder of that model")
        if start == "bundled":
            verified_start()  # its weights and config, before any stage (or the model's download) runs
        if start not in SFT_STARTS:
            _check_start_folder(Path(start))

    def rl_config(self) -> RLConfig:
        """The RL stage's config: the RL knobs set here, and what the pipeline fixes (a checkpoint
        every step, one round of games per GRPO step, RL/best by what the validation evals play)."""
        knobs = {f.metadata[RL_KEY]: getattr(self, f.name) for f in fields(self)
                 if RL_KEY in f.metadata and f.name not in HEAD_RL_FIELDS}
        fixed = {"checkpoint_every": 1, "grpo.max_rollouts": 1,
                 "best_by": "endgame" if self.rl_eval_endgame else "wins"}
        return build_config({}, {**knobs, **fixed}, "pipeline", RL_FLAGS)

    def head_rl_config(self) -> RLConfig:
        """The RL stage's config from an SFT start: head RL on the start's fitted head."""
        knobs = {f.metadata[RL_KEY]: getattr(self, f.name) for f in fields(self)
                 if RL_KEY in f.metadata and (f.name in HEAD_RL_FIELDS or f.name in SHARED_RL_FIELDS)}
        return build_config({}, {**knobs, "head.train": "on", "checkpoint_every": 10}, "pipeline", HEAD_RL_FLAGS)

    @property
    def resolved_start(self) -> str:
        """bundled, scratch, or an adapter folder: what `sft_start` means for this model."""
        if self.sft_start == "auto":
            return "bundled" if self.model == "default" else "scratch"
        return self.sft_start


def _check_start_folder(folder: Path) -> None:
    """An SFT start folder holds both adapter files and a config that reads: it is copied into the run
    and its stage recorded as done, so a missing config ended in a 46-line traceback, and one that does not
    read failed every later call on the run's copy."""
    from llm.adapter_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS, read_adapter_config

    missing = [name for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG) if not (folder / name).is_file()]
    if missing:
        raise UserError(f"--sft-start {folder}: not an adapter folder (no {missing[0]} there); give auto, bundled, "
                        "scratch or an SFT adapter folder")
    read_adapter_config(folder)


# How messages name each setting: by the flag spelt from its name, also where only a recipe sets it.
NAMES = {f.name: flag(f.name) for f in fields(PipelineSettings)}
HEAD_RL_FIELDS = ("head_rl_steps", "head_games", "head_eval_every")  # the RL stage's knobs from an SFT start
SHARED_RL_FIELDS = ("seed", "max_tokens", "dtype")  # and those both RL stages take
# What a run from an SFT start reads (every other setting is the from-scratch stages'), and what only it reads.
START_ONLY = ("start_head", "eval_start_head", *HEAD_RL_FIELDS)
START_READS = frozenset({"model", "sft_start", "eval_games", *START_ONLY, *SHARED_RL_FIELDS})
# The pipeline's flag behind each RL knob it sets: an RL check names the flag the user gave.
RL_FLAGS = {f.metadata[RL_KEY]: NAMES[f.name] for f in fields(PipelineSettings)
            if RL_KEY in f.metadata and f.name not in HEAD_RL_FIELDS}
HEAD_RL_FLAGS = {f.metadata[RL_KEY]: NAMES[f.name] for f in fields(PipelineSettings)
                 if RL_KEY in f.metadata and (f.name in HEAD_RL_FIELDS or f.name in SHARED_RL_FIELDS)}


class Stages:
    """Which stages finished, with their summaries; saved atomically after each one.

    A folder that holds a pipeline run continues it (sft/run_folder.py's rule): its settings
    are the record's, and a `given` setting must equal it (None: all of `settings` were given).
    """

    def __init__(self, out: Path, settings: PipelineSettings, given: frozenset[str] | None = None,
                 resume: bool = False) -> None:
        self.path = out / STAGES_FILE
        self.done: dict[str, dict] = {}
        self.settings = settings
        if not self.path.exists():
            if resume:
                raise UserError(f"--resume: {out} holds no pipeline run to continue; run the same command "
                                "without --resume to start one")
            return
        saved = read_json(self.path, "pipeline record")
        self.settings = _recorded_settings(self.path, saved.get("settings"))
        asked, recorded = asdict(settings), asdict(self.settings)
        changed = [NAMES[name] for name in sorted(asked if given is None else given & asked.keys())
                   if asked[name] != recorded[name]]
        if given is not None and "recipe" in given and any(asked[name] != recorded[name]
                                                           for name in GPU_RECIPE if name not in given):
            changed.append("--recipe")  # a recipe given sets its sizes, which were silently the run's own
        refuse_changes(out, "a pipeline run", changed, "its settings may not change")
        stages = saved.get("stages", {})
        if not isinstance(stages, dict) or not all(isinstance(s, dict) for s in stages.values()):
            raise UserError(f"{self.path} is corrupt (stages must map each stage to its summary); "
                            "remove it to start over")
        self.done = stages

    def run(self, name: str, stage: Callable[[], dict]) -> dict:
        if name not in self.done:
            began = time.perf_counter()
            self.done[name] = {**stage(), "stage_seconds": round(time.perf_counter() - began, 1)}
            atomic_write_json(self.path, {"settings": asdict(self.settings), "stages": self.done})
        return self.done[name]


def _recorded_settings(path: Path, saved) -> PipelineSettings:
    """The settings the pipeline run in the folder started with."""
    if not isinstance(saved, dict) or set(saved) != {f.name for f in fields(PipelineSettings)}:
        raise UserError(f"{path} does not hold this version's pipeline settings; choose another --out")
    return PipelineSettings(**saved)


def run_pipeline(out: Path, settings: PipelineSettings, show_progress: bool = True,
                 given: frozenset[str] | None = None, resume: bool = False) -> dict:
    """Every stage not done yet, holding OUT's lock (common/run_lock.py) throughout; a pipeline run
    already in `out` continues with its own settings (`Stages`)."""
    from common.run_lock import run_lock

    settings.check()
    if distributed.world().size > 1:
        raise UserError("pipeline runs in one process; under mlx.launch run its stages `sft` and `rl` instead")
    with run_lock(out):
        claim(out, "pipeline")
        stages = Stages(out, settings, given, resume)
        _note_unread(stages.settings, given or frozenset())
        return _run_pipeline(out, stages, show_progress)


def _note_unread(settings: PipelineSettings, given: frozenset[str]) -> None:
    """A note for each flag given that the run's way (from an SFT start, or from scratch) leaves unread."""
    start = settings.resolved_start
    if start == "scratch":
        unread, reason = START_ONLY, "this run's SFT is from scratch: gen-sft, LoRA SFT and LoRA RL"
    else:
        unread = tuple(name for name in NAMES if name not in START_READS)
        reason = (f"this run starts from an SFT adapter ({start}), fits a naming head on it and trains the head "
                  "(--start-head, --head-rl-steps, --head-games)")
    note_unread([NAMES[name] for name in unread if name in given], reason)


def _run_pipeline(out: Path, stages: Stages, show_progress: bool) -> dict:
    from llm.loading import resolve_model

    # Every setting of every stage, and the model, are checked before the first stage runs
    # (settings.check() ran before the lock): a bad --group-size must not cost a gen-sft and an SFT run.
    settings = stages.settings
    resolve_model(settings.model)
    out.mkdir(parents=True, exist_ok=True)
    if settings.resolved_start == "scratch":
        adapters, rl, models = _from_scratch(out, stages, show_progress)
    else:
        adapters, rl, models = _from_start(out, stages, show_progress)
    return _compare(out, stages, adapters, rl, models, show_progress)


def _from_scratch(out: Path, stages: Stages, show_progress: bool) -> tuple[dict, dict, tuple[str, ...]]:
    """gen-sft, LoRA SFT and LoRA RL (then a naming head on RL's adapter, when asked)."""
    from rl.loop import RunRequest, run_rl
    from rl.naming_head import run_naming_head
    from sft.checkpoint import latest_checkpoint
    from sft.config import SFTConfig
    from sft.gen_command import generate_dataset
    from sft.run import run_sft

    settings = stages.settings
    data, sft_dir, rl_dir = out / "data", out / "sft", out / "rl"
    sft_config = SFTConfig(model=settings.model, data=str(data), out=str(sft_dir), iters=settings.sft_iters,
                           learning_rate=settings.sft_lr, batch_size=settings.sft_batch, rank=settings.sft_rank, eval_every=settings.sft_iters, eval_games=0,
                           save_every=max(1, settings.sft_iters // 4), seed=settings.seed, dtype=settings.dtype)
    sft_config.check()
    rl_config = settings.rl_config()
    console = Console()

    console.rule("1/4 gen-sft: solver games with chain-of-thought")
    gen = GenSettings(games=settings.sft_games, expert=settings.expert, max_history=settings.max_history,
                      seed=settings.seed)
    stages.run("gen-sft", lambda: generate_dataset(data, gen, settings.model, show_progress=show_progress))

    console.rule("2/4 sft: LoRA on the solver's answers")
    stages.run("sft", lambda: run_sft(sft_config, show_progress=show_progress))

    console.rule("3/4 rl: GRPO alternating with filtered expert iteration"
                 + (", then the naming head" if settings.naming_head else ""))
    rl = stages.run("rl", lambda: run_rl(RunRequest(settings.model, str(sft_dir / "adapter"), rl_dir, rl_config,
                                                    resume=latest_checkpoint(rl_dir) is not None,
                                                    show_progress=show_progress)))
    adapters = {"base": None, "sft": str(sft_dir / "adapter"), "rl": rl["best_adapter"] or rl["adapter"]}
    if settings.naming_head:
        head = HeadSettings(positions=settings.naming_head, seed=settings.seed)
        stages.run("naming-head", lambda: _head_figures(run_naming_head(
            settings.model, adapters["rl"], head, None, settings.dtype, show_progress)))
    compared = {**rl, "compared_step": rl["best_step"] if rl["best_adapter"] else rl["steps"]}
    return adapters, compared, MODELS


def _from_start(out: Path, stages: Stages, show_progress: bool) -> tuple[dict, dict, tuple[str, ...]]:
    """An SFT start (the bundled one or a folder), a naming head fitted on it, and head RL."""
    from llm.bundled_start import copy_start
    from rl.loop import RunRequest, run_rl
    from rl.naming_head import run_naming_head
    from sft.checkpoint import latest_checkpoint

    settings = stages.settings
    start = settings.resolved_start
    sft_dir, rl_dir = out / "sft" / "adapter", out / "rl"
    console = Console()
    if start == "bundled":
        console.print("SFT from scratch takes hours on a CPU (2,400 steps of 16): this run starts from the bundled "
                      "SFT start (llm/sft_start/, the GPU recipe's SFT stage) and runs the RL stage; --sft-start "
                      "scratch runs the from-scratch demo instead.", markup=False, highlight=False)
    console.rule(f"1/4 sft: the SFT start ({start})")
    source = Path(start) if start != "bundled" else None
    stages.run("sft", lambda: _copied_start(source, sft_dir, copy_start))

    console.rule(f"2/4 naming head on the SFT start: {settings.start_head} positions")
    head = HeadSettings(positions=settings.start_head, seed=settings.seed)
    stages.run("naming-head", lambda: _head_figures(run_naming_head(
        settings.model, str(sft_dir), head, None, settings.dtype, show_progress)))

    console.rule("3/4 rl: GRPO alternating with expert iteration on the naming head")
    rl = stages.run("rl", lambda: run_rl(RunRequest(settings.model, str(sft_dir), rl_dir, settings.head_rl_config(),
                                                    resume=latest_checkpoint(rl_dir) is not None,
                                                    show_progress=show_progress)))
    adapters = {"base": None, "sft": str(sft_dir), START_HEAD_MODEL: str(sft_dir), "rl": rl["best_adapter"]}
    models = ("base", "sft", START_HEAD_MODEL, "rl") if settings.eval_start_head else MODELS
    return adapters, {**rl, "compared_step": rl["best_step"]}, models


def _copied_start(source: Path | None, dest: Path, copy_start) -> dict:
    """The SFT stage from a start: its adapter copied into the run (the bundled one verified first)."""
    import shutil

    from llm.adapter_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS

    if source is None:
        copy_start(dest)
    else:
        dest.mkdir(parents=True, exist_ok=True)
        for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
            shutil.copy2(source / name, dest / name)
    return {"adapter": str(dest), "start": "bundled" if source is None else str(source)}


def _compare(out: Path, stages: Stages, adapters: dict, rl: dict, models: tuple[str, ...],
             show_progress: bool) -> dict:
    """Every model on the same held-out test secrets, RL judged against SFT, paired."""
    from eval.run import EvalRequest, ModelSpec, run_eval
    from solver.setup import load_setup

    settings = stages.settings
    Console().rule("4/4 eval: the same held-out test secrets for every model")
    # Sampled, not greedy: a greedy model repeats the same unparsable answer three times and
    # loses every game to it (the SFT eval in the first session did exactly that).
    sampling = SamplingSettings(max_tokens=settings.max_tokens)
    results = {}
    for name in models:
        spec = ModelSpec(settings.model, adapters[name], sampling, dtype=settings.dtype,
                         naming_head=name != "sft" or START_HEAD_MODEL not in adapters)
        request = EvalRequest("test", settings.eval_games, settings.seed, model=spec)
        results[name] = stages.run(f"eval-{name}", lambda request=request, name=name: _without_games(run_eval(
            load_setup("answers"), request, str(out / f"eval-{name}.json"), show_progress)))
    verdict = improvement_verdict(*(read_json(out / f"eval-{name}.json", "eval results") for name in ("sft", "rl")))
    summary = {"out": str(out), "settings": asdict(settings), "models": list(models), "eval": results,
               "rl_compared_step": rl["compared_step"], "rl_adapter": adapters["rl"],
               "rl_vs_sft": {**verdict.to_json(), "summary": verdict.line("SFT", "RL")},
               "seconds": {name: stage["stage_seconds"] for name, stage in stages.done.items()}}
    atomic_write_json(out / "summary.json", summary)
    return summary


def _head_figures(record: dict) -> dict:
    """The naming head's figures kept in stages.json; its curve stays in its own record."""
    return {key: value for key, value in record.items() if key != "curve"}


def _without_games(result: dict) -> dict:
    """The eval figures kept in stages.json; every game stays in OUT/eval-<model>.json."""
    return {key: value for key, value in result.items() if key != "per_game"}


def comparison_table(summary: dict) -> Table:
    """Every figure of every model, and the solver's wins and mean guesses on the same secrets
    beside them (what a model could reach), as the main job's report ends."""
    temperature = summary["eval"]["sft"].get("temperature", SamplingSettings().temperature)
    models = summary.get("models", MODELS)
    solver = solver_figures(summary["eval"]["sft"])
    table = Table(title=f"{summary['eval']['sft']['games']} held-out test games, sampled at {temperature}, "
                        f"the same secrets for each: {' vs '.join(models)}" + (" (and the solver)" if solver else ""))
    table.add_column("figure")
    for name in models:
        label = f"rl (step {summary['rl_compared_step']})" if name == "rl" and "rl_compared_step" in summary else name
        table.add_column(label, justify="right")
    if solver:
        table.add_column("solver", justify="right")
    for label, key, pattern in FIGURES:
        values = [summary["eval"][name].get(key) for name in models] + ([solver.get(key)] if solver else [])
        table.add_row(label, *("-" if v is None else pattern.format(v) for v in values))
    return table


def solver_figures(result: dict) -> dict:
    """The solver's figures (FIGURES' keys) on an eval's secrets, from what the eval recorded of it."""
    beside = result.get("solver_same_secrets")
    if not beside:
        return {}
    games = result["games"]
    return {"games": games, "wins": beside["wins"], "win_rate": beside["wins"] / games,
            "mean_guesses": beside["mean_guesses"]}
