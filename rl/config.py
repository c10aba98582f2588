"""The RL run's configuration: every knob, read from JSON or YAML and checked up front.

A config file mirrors `RLConfig`: top-level run settings plus one section per part
(`reward`, `rollout`, `grpo`, `ei`, `lora`). Any section or key may be left out (the
defaults apply); an unknown key, a value of the wrong type or out of range, or a bad
schedule string is a one-line `UserError` naming the key, before anything loads.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import UserError
from common.fileio import parse_json, read_text
from common.knobs import checked, declared, knob, knob_like, shown
from common.options import SEED
from llm.loading import DTYPE
from rl.expert_iteration import EISettings
from rl.grpo import GrpoSettings
from rl.head_policy import HeadRLSettings
from rl.heldout import BEST_BY
from rl.reward import RewardWeights
from rl.rollout import RolloutSettings
from rl.schedule import Schedule, parse_schedule
from sft.lora import AdapterSettings

SECRET_KINDS = ("answers", "allowed")
SECRET_SPLITS = ("train", "untaught")  # eval/splits.py SPLITS: both exclude every held-out word


@dataclass(frozen=True)
class RLConfig:
    steps: int = knob(100, "Total steps (GRPO updates + expert-iteration rounds).", range=(1, 10_000_000),
                      flag="--steps")
    schedule: str = knob("grpo:4,ei:1", 'Phases in turn, e.g. "grpo:4,ei:1".', flag="--schedule")
    seed: int = knob_like(SEED)
    checkpoint_every: int = knob(10, "Steps between checkpoints.", range=(1, 10_000_000), flag="--checkpoint-every")
    keep_checkpoints: int = knob(2, "Checkpoints kept on disk, the latest ones.", range=(1, 1000))
    secrets: str = knob("answers", "The list secrets come from (held-out words are always excluded).",
                        choices=SECRET_KINDS)
    # SFT memorises the answers it names: at a one-candidate position its wins on training secrets
    # are recall, which GRPO would reinforce; on untaught words only reading the clues wins.
    secret_split: str = knob("train", "Which of the list's trainable words RL plays: all (train), or those SFT data "
                                      "never trains on (untaught).", choices=SECRET_SPLITS, flag="--secret-split")
    dtype: str = knob_like(DTYPE)
    eval_every: int = knob(10, "Steps between held-out validation evals; the best is kept as OUT/best (0: none).",
                           range=(0, 10_000_000), flag="--eval-every")
    eval_games: int = knob(32, "Held-out validation games per eval, the same ones every time (0: none).",
                           range=(0, 100_000), flag="--eval-games")
    eval_endgame: int = knob(0, "Held-out validation endgame positions per eval (eval --endgame's benchmark; "
                                "0: none).", range=(0, 100_000), flag="--eval-endgame")
    best_by: str = knob("wins", "What OUT/best is chosen by: wins or endgame (the closing rate).", choices=BEST_BY,
                        flag="--best-by")
    reward: RewardWeights = field(default_factory=RewardWeights)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    grpo: GrpoSettings = field(default_factory=GrpoSettings)
    ei: EISettings = field(default_factory=EISettings)
    lora: AdapterSettings = field(default_factory=AdapterSettings)  # a fresh adapter, when --adapter is not given
    head: HeadRLSettings = field(default_factory=HeadRLSettings)  # the start's naming head, trained (rl/head_loop.py)

    @property
    def phases(self) -> Schedule:
        return parse_schedule(self.schedule)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


# Every knob of a run by dotted key ("grpo.kl_coef"), as the settings declare it (common/knobs.py).
KNOBS = {entry.key: entry for entry in declared(RLConfig)}


def load_config_file(path: str | Path) -> dict:
    """The raw mapping in a .json, .yaml or .yml file."""
    import yaml

    path = Path(path)
    text = read_text(path, "config")
    if path.suffix.lower() == ".json":
        return parse_json(text, f"config {path}")
    try:
        data = yaml.load(text, Loader=_unique_key_loader())
    except _DuplicateYamlKey as err:
        key, line = err.args
        raise UserError(f"config {path}: the key {key} is given twice (line {line}); keep one") from None
    except yaml.YAMLError as err:
        raise UserError(f"config {path} is not valid YAML: {' '.join(str(err).split())[:200]}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"config {path} must hold a mapping of settings, got {type(data).__name__}")
    return data


class _DuplicateYamlKey(Exception):
    pass


def _unique_key_loader() -> type:
    """yaml's safe loader, except that a key given twice in one mapping is an error (yaml keeps the last)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, typing.Hashable):
                    continue  # the safe loader refuses it itself
                if key in seen:
                    raise _DuplicateYamlKey(key, key_node.start_mark.line + 1)
                seen.add(key)
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


@dataclass(frozen=True)
class Names:
    """How a message names a setting: by the flag that gave it, else by its key, after the
    name of the file (or the defaults) it came from. A flag's mistake is never blamed on a file."""

    where: str
    flags: dict[str, str] = field(default_factory=dict)  # config key -> the flag that set it

    def __call__(self, key: str) -> str:
        return self.flags.get(key, key)

    def blame(self, *keys: str) -> str:
        """The start of a message about `keys`: empty when flags gave them all, else the file's name."""
        return "" if all(key in self.flags for key in keys) else f"{self.where}: "


def build_config(data: dict, overrides: dict | None = None, where: str = "config",
                 flags: dict[str, str] | None = None) -> RLConfig:
    """An `RLConfig` from a (possibly partial) mapping, with `overrides` ({"grpo.kl_coef": 0.1}) on top.

    `where` names the mapping's source in errors, `flags` the flag behind each key that
    one set ({"grpo.kl_coef": "--kl-coef"}). With neither evals' count given, held-out
    evals are off unless `eval_every` was asked for: 0 games means none, as in `sft`.
    """
    names = Names(where, flags or {})
    merged = _deep_copy(data)
    for dotted, value in (overrides or {}).items():
        node = merged
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    config = _build(RLConfig, merged, "", names)
    config.reward.check(where)
    if not (config.eval_games or config.eval_endgame) and "eval_every" not in merged:
        config = dataclasses.replace(config, eval_every=0)
    _check_heldout(config, names)
    _check_start(config, names)
    if config.lora.full:
        raise UserError(f"{where}: lora.full must be false: RL trains a LoRA adapter (its reference policy is "
                        "the model with the adapter switched off)")
    return config


def check_values(values: dict, flags: dict[str, str]) -> None:
    """Each flag's own type and range ({"rollout.group_size": 1}), before any file is read:
    a bad flag is named as itself, not as a key of the file it would have overridden."""
    names = Names("options", flags)
    for dotted, value in values.items():
        _check_value(dotted, value, names)


def _check_heldout(config: RLConfig, names: Names) -> None:
    """Held-out evals need something to play, and RUN/best a figure to be chosen by."""
    keys = ("eval_every", "eval_games", "eval_endgame")
    if config.eval_every and not (config.eval_games or config.eval_endgame):
        every, games, endgame = map(names, keys)
        raise UserError(f"{names.blame(*keys)}{every} is {config.eval_every} but {games} and {endgame} are 0: "
                        f"give one of them, or {every} 0 for no held-out evals")
    needs = {"wins": ("eval_games", config.eval_games), "endgame": ("eval_endgame", config.eval_endgame)}
    key, value = needs[config.best_by]
    if config.eval_every and not value:
        raise UserError(f"{names.blame('best_by', key)}{names('best_by')} {config.best_by} needs {names(key)} > 0")


def _check_start(config: RLConfig, names: Names) -> None:
    """start: games needs its file, and the file is read by nothing else; any_share mixes into another start."""
    keys = ("rollout.start", "rollout.start_games")
    start, games = map(names, keys)
    if (config.rollout.start == "games") != bool(config.rollout.start_games):
        raise UserError(f"{names.blame(*keys)}{start} games and {games} go together: "
                        f"{start} is {config.rollout.start}, {games} is {config.rollout.start_games or 'not given'}")
    if config.rollout.start == "any" and config.rollout.any_share:
        share = names("rollout.any_share")
        raise UserError(f"{names.blame('rollout.start', 'rollout.any_share')}{share} mixes ordinary start states into "
                        f"start endgame or games; with {start} any every start state is one already")


def _deep_copy(data: dict) -> dict:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in data.items()}


def _build(cls, data, prefix: str, names: Names):
    if not isinstance(data, dict):
        raise UserError(f"{names.where}: {prefix.rstrip('.') or 'the config'} must be a mapping, got {shown(data)}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UserError(f"{names.where}: unknown key {prefix}{unknown[0]} (known: {', '.join(sorted(known))})")
    values = {}
    for name in known & set(data):
        kind, key = hints[name], prefix + name
        if dataclasses.is_dataclass(kind):
            values[name] = _build(kind, data[name], key + ".", names)
        else:
            values[name] = _check_value(key, data[name], names)
    config = cls(**values)
    if cls is RLConfig:
        config.phases  # noqa: B018 -- parses the schedule: a bad string fails here, with the others
    return config


def _check_value(key: str, value, names: Names):
    """`value` for the knob `key` as its declaration allows (a float from an int), or a UserError naming it."""
    what = f"{names.blame(key)}{names(key)}"
    value = checked(KNOBS[key], value, what)
    if key == "schedule":
        parse_schedule(value, what)
    return value
