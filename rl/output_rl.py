"""RL on the model's own output layer: three gains of its whole-word rows, the rest frozen.

`distill --part output` gives the model's output layer a spelling term (W + S P,
llm/spelled_output.py) fitted toward the naming head's choices. What head RL then taught the head
(results/head-gains/) is not there: most of head RL's lift was one bias toward the game's secret
list, and a letter term cannot say which of the words that fit the clues the game can draw. Nor
could a distilled student carry that bias from an RL'd teacher (results/distill-head-rl/). Here
RL trains, on the output layer of the distilled model itself, the head's kind of numbers, each a
weight of one whole-word part of the layer:

    z_v = W_v h + [v a whole allowed word] ((beta - 1) W_v h + alpha D_v h + bias a_v (u . h))

with D = the distilled layer minus the start's (the spelling term), a_v = 1 for a token that is a
whole word of the game's secret list (a rule of the game, as the head's bias is), and u a fixed
direction along which every naming state reads about 1 (the mean state at ` Only`, scaled): an
mlx-lm output layer has no bias, and this is one written into its weights. beta weighs the
model's own word scores (where its memorised answers live), alpha the letters, bias the secret
list. The merged layer is again one plain matrix: OUT/model is an mlx-lm folder any runtime
plays. Three numbers cannot tell one position from another, so what they learn holds on words
never trained on, as head RL's four did; the arrays the distillation fitted stay as they are.

The policy gradient is exact, not sampled. The model frozen below the layer, a position's state
is fixed, and each whole-word token names one allowed word, so a position's expected reward is a
sum over those words: their probabilities at the play temperature times the reward kernel's
score of each as the guess there (rl/reward.py `score_rows`; played and refused words score the
floor). A secret of several tokens is named with its tokens' probabilities along the cached rows
of its spelling; any other token opens a word the frozen rows cannot see, scored as the mean
other word at the position. No group is without signal, and no step needs the model. The
positions are every answer of the model's own games on training secrets (`--own-games`); its own
games on validation secrets choose the step. Each is read after the model's own answer text up to
where it writes the word it plays, as it plays (`--turns one-left`: the one-candidate answers only).

What this exact objective cannot see is the text: the gains act at every whole-word token, so they
also change the words the thought lists before the word played, and the reward is taken over the
text as the untuned model wrote it. Measured, that is where the tuned layers lost their games
(results/output-rl/): the objective approved the gains at every answer, and in play the candidate
lists filled with answer-list words that do not fit the clues.

The gains act at every token, not only where a word is named: every whole-word token is also a
word the thought may write. So each step also pays the exact KL from the distilled layer to the
tuned one at the distill run's anchor rows (every token of teacher answers), the leash GRPO's KL
to its reference is; the distilled layer's own anchors held it to the start the same way.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np

from common.errors import UserError
from common.fileio import append_line, atomic_replace_dir, atomic_write_json, read_arrays, read_json
from common.knobs import knob, knob_like
from common.options import SEED
from eval.endgame import EndgamePosition
from llm.naming_head import NamingHead, head_beside
from llm.output_layer import output_weight
from llm.spelled_output import token_spelling, write_output_layer
from rl.distill import (ANCHORS_FILE, SETTINGS_FILE, STATES_FILE, DistillSettings, Rows, Teacher, distill_positions,
                        final_states, gather, own_answers)
from rl.naming_head import said_context
from rl.policy import load_policy
from rl.reward import RewardScorer
from sft.cot import truthful_answer
from sft.export import RECORD
from sft.lora import AdapterSettings
from solver.setup import load_setup

GAINS = ("beta", "alpha", "bias")  # the own word scores' weight, the spelling term's, the secret list's bias
RUN_FILE = "output_rl.json"  # which distill run this one tunes: its states are that run's
OWN_CONTEXTS = "the model's own answer text"  # what the own positions' states were read after (RUN_FILE)
TURNS = ("every", "one-left")
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class OutputRLSettings:
    steps: int = knob(300, "Adam steps, each over every training position (exact expected rewards, no sampling).",
                      range=(1, 1_000_000), flag="--steps")
    lr: float = knob(0.02, "Adam learning rate of the three gains.", range=(0.0, 10.0), open_low=True, flag="--lr")
    temperature: float = knob(0.7, "The play temperature whose probabilities the expected reward is taken at.",
                              range=(0.0, 10.0), open_low=True, flag="--temperature")
    eval_every: int = knob(10, "Steps between readings at the validation positions (the best expected reward there "
                               "is kept).",
                           range=(1, 1_000_000), flag="--eval-every")
    kl_coef: float = knob(1.0, "Weight of the exact KL from the distilled layer to the tuned one at the anchor rows "
                               "(every token of teacher answers): the gains act at every token, and without it "
                               "they rewrote 28% of those tokens' most likely choice (results/output-rl/).",
                          range=(0.0, 1e6), flag="--kl-coef")
    anchor_rows: int = knob(4096, "Anchor rows the KL reads (drawn with --seed from the distill run's).",
                            range=(1, 10_000_000), flag="--anchor-rows")
    turns: str = knob("every", "Which of its own answers the expected reward is taken at: every one (opening included), "
                               "or those with one candidate left only.",
                      choices=TURNS, flag="--turns")
    seed: int = knob_like(SEED)


@dataclass(frozen=True)
class Split:
    """One split's positions as cached arrays: every row of each position's secret, the first at ` Only`."""
    own_logits: np.ndarray  # (rows, words) W h at the whole-word tokens
    spelled: np.ndarray  # (rows, words) D h: the distilled spelling term there
    along: np.ndarray  # (rows,) u . h
    rest_lse: np.ndarray  # (rows,) logsumexp over every other token of W h / T
    target: np.ndarray  # (rows,) the secret's token's logit when not a whole word, W h
    target_word: np.ndarray  # (rows,) the secret's index among the whole words, or -1
    owners: np.ndarray  # (rows,) the position of each row
    first: np.ndarray  # (positions,) each position's first row
    rewards: np.ndarray  # (positions, words) the reward kernel's score of each whole word as the guess
    win: np.ndarray  # (positions,) the score of the secret
    other: np.ndarray  # (positions,) the mean score of the other words: what an unseen word is worth
    several: np.ndarray  # (positions,) 1 where the secret takes several tokens

    @cached_property
    def membership(self) -> mx.array:
        """(positions, rows) 1 where a row belongs to a position: built once, read every step."""
        owners = np.zeros((len(self.first), len(self.owners)), np.float32)
        owners[self.owners, np.arange(len(self.owners))] = 1.0
        return mx.array(owners)


@dataclass(frozen=True)
class Anchors:
    """Rows of teacher answers, where the tuned layer should write what the distilled one does."""
    own_logits: np.ndarray  # (rows, words) W h at the whole-word tokens
    spelled: np.ndarray  # (rows, words) D h
    along: np.ndarray  # (rows,) u . h
    rest_lse: np.ndarray  # (rows,) logsumexp over every other token of W h / T
    rest_max: np.ndarray  # (rows,) the largest other token's W h / T


def word_logits(gains: dict[str, mx.array], own: np.ndarray, spelled: np.ndarray, along: np.ndarray,
                secret_words: mx.array, temperature: float) -> mx.array:
    """(rows, words) the whole-word tokens' logits over the temperature under the gains."""
    return (gains["beta"] * mx.array(own) + gains["alpha"] * mx.array(spelled)
            + gains["bias"] * secret_words[None, :] * mx.array(along)[:, None]) / temperature


def anchor_kl(gains: dict[str, mx.array], anchors: Anchors, secret_words: mx.array, temperature: float) -> mx.array:
    """The mean exact KL from the distilled layer's next-token distribution to the tuned one's at
    the anchor rows (every other token's logit is the same in both, so it enters through the
    normaliser alone)."""
    rest = mx.array(anchors.rest_lse)
    tuned = word_logits(gains, anchors.own_logits, anchors.spelled, anchors.along, secret_words, temperature)
    start = word_logits(initial_gains(), anchors.own_logits, anchors.spelled, anchors.along, secret_words, temperature)
    lse_t = mx.logaddexp(rest, mx.logsumexp(tuned, axis=-1))
    lse_d = mx.logaddexp(rest, mx.logsumexp(start, axis=-1))
    p_words = mx.exp(start - lse_d[:, None])
    words = (p_words * (start - tuned)).sum(axis=-1)
    return (words + lse_t - lse_d).mean()


def anchor_agreement(gains: dict[str, mx.array], anchors: Anchors, secret_words: mx.array,
                     temperature: float) -> float:
    """The share of anchor rows whose most likely token is the same under the tuned layer as under the distilled."""
    def top_is_word(g):
        z = word_logits(g, anchors.own_logits, anchors.spelled, anchors.along, secret_words, temperature)
        best = z.max(axis=-1)
        return best > mx.array(anchors.rest_max), z.argmax(axis=-1)

    word_t, arg_t = top_is_word(gains)
    word_d, arg_d = top_is_word(initial_gains())
    same = mx.where(word_d, word_t & (arg_t == arg_d), ~word_t)
    return round(float(same.astype(mx.float32).mean()), 5)


class OutputGains:
    """The three gains and the layer they make (`merged`), over the distilled model's output layer."""

    def __init__(self, start: mx.array, distilled: mx.array, words: np.ndarray, secret_words: np.ndarray,
                 direction: mx.array) -> None:
        self.start, self.distilled, self.direction = start, distilled, direction
        self.words, self.secret_words = words, secret_words

    def merged(self, gains: dict[str, mx.array]) -> mx.array:
        """The (vocabulary, hidden) output layer the gains make: the distilled one at (1, 1, 0)."""
        rows = mx.array(self.words)
        own, spelling = self.start[rows], self.distilled[rows] - self.start[rows]
        bias = mx.array(self.secret_words.astype(np.float32))[:, None] * self.direction[None, :]
        changed = gains["beta"] * own + gains["alpha"] * spelling + gains["bias"] * bias
        layer = mx.array(self.distilled)
        layer[rows] = changed
        return layer


def initial_gains() -> dict[str, mx.array]:
    return {"beta": mx.array(1.0), "alpha": mx.array(1.0), "bias": mx.array(0.0)}


def row_log_probs(gains: dict[str, mx.array], own: np.ndarray, spelled: np.ndarray, along: np.ndarray,
                  rest_lse: np.ndarray, target: np.ndarray, target_word: np.ndarray, secret_words: mx.array,
                  temperature: float) -> tuple[mx.array, mx.array, mx.array]:
    """Each row's whole-word logits over the temperature, its normaliser, and the log-probability
    of its token (a whole word's by the gains, any other's from the cached W h)."""
    z = word_logits(gains, own, spelled, along, secret_words, temperature)
    lse = mx.logaddexp(mx.array(rest_lse), mx.logsumexp(z, axis=-1))
    word = mx.array(np.maximum(target_word, 0))
    own_target = mx.take_along_axis(z, word[:, None], axis=-1)[:, 0]
    return z, lse, mx.where(mx.array(target_word >= 0), own_target, mx.array(target) / temperature) - lse


def expected(gains: dict[str, mx.array], split: Split, secret_words: mx.array, temperature: float
             ) -> tuple[mx.array, mx.array]:
    """(positions,) each position's expected reward and its probability of naming the secret."""
    z, lse, log_p = row_log_probs(gains, split.own_logits, split.spelled, split.along, split.rest_lse, split.target,
                                  split.target_word, secret_words, temperature)
    p_secret = mx.exp(split.membership @ log_p)
    first = mx.array(split.first)
    p_words = mx.exp(z[first] - lse[first][:, None])
    several = mx.array(split.several)
    named = (p_words * mx.array(split.rewards)).sum(axis=-1) + several * p_secret * mx.array(split.win)
    unseen = 1.0 - p_words.sum(axis=-1) - several * p_secret
    return named + unseen * mx.array(split.other), p_secret


@dataclass(frozen=True)
class Source:
    """What the run reads of the distill folder: its settings, its model, the start adapter's head."""
    folder: Path
    settings: DistillSettings
    model_spec: str
    adapter: str

    @classmethod
    def of(cls, distilled: str) -> Source:
        folder = Path(distilled)
        if not (folder / "model" / "config.json").exists() or not (folder / SETTINGS_FILE).exists():
            raise UserError(f"--distilled {distilled} is not a finished distill --part output run (no model/ or "
                            f"{SETTINGS_FILE}): run distill first")
        record = read_json(folder / SETTINGS_FILE, "distill settings")
        known = {k: v for k, v in record.items() if k in DistillSettings.__dataclass_fields__}
        if known.get("part", "output") != "output":
            raise UserError(f"--distilled {distilled} trained a LoRA (--part mlp); output-rl tunes a spelled output layer")
        return cls(folder, DistillSettings(**known), record["model"], record["adapter"])


class SaidTeacher(Teacher):
    """The frozen start read at its own games' positions after the model's own answer text, and at
    the solver's positions after the teacher's thought."""

    def __init__(self, model, tokenizer, head: NamingHead, said: dict[str, list[int]]) -> None:
        super().__init__(model, tokenizer, head)
        self.said = said

    def context(self, position: EndgamePosition) -> list[int]:
        return self.said.get(position.key) or super().context(position)


def gather_own(source: Source, out: Path, own_games: tuple[str, ...], own_validation: tuple[str, ...],
               every_turn: bool, show_progress: bool
               ) -> tuple[dict[str, list[EndgamePosition]], dict[str, Rows], dict[str, np.ndarray], Teacher]:
    """The states of the own games' positions after the model's own answer text up to where it named
    its word (positions where it named none are left out), passed by the frozen start into OUT's copy
    of the distill folder's states (the distill run is read, never written)."""
    states = out / STATES_FILE
    if not states.exists():
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.folder / STATES_FILE, states)
    head_file = head_beside(source.adapter)
    if head_file is None:
        raise UserError(f"the distill run's adapter {source.adapter} has no naming head beside it any more")
    policy = load_policy(source.model_spec, source.adapter, AdapterSettings(), "float32")
    said: dict[str, list[int]] = {}
    own: dict[str, list[EndgamePosition]] = {}
    for split, paths in (("own", own_games), ("own_validation", own_validation)):
        own[split] = []
        for position, move in own_answers(paths, split, every_turn):
            # the solver's games hold no text: what it writes is the true thought for its guess
            text = move.get("text") or truthful_answer(position.state, move["guess"])
            context = said_context(policy.tokenizer, position, text)
            if context is not None:
                said[position.key] = context
                own[split].append(position)
    teacher = SaidTeacher(policy.model, policy.tokenizer, NamingHead.load(head_file), said)
    splits = {**distill_positions(source.settings, policy.tokenizer), **own}
    rows, finals = gather(states, teacher, splits, show_progress)
    return splits, rows, finals, teacher


def row_arrays(states: np.ndarray, tokens: np.ndarray, layers: OutputGains, temperature: float,
               chunk: int = 256) -> tuple[np.ndarray, ...]:
    """At each row's final state: W h and D h at the whole-word tokens, u . h, the logsumexp and the
    largest of every other token's W h / T, and W h at the row's token; a chunk of rows at a time
    (whole-vocabulary logits of every row would take gigabytes)."""
    words = mx.array(layers.words)
    rest = np.ones(layers.start.shape[0], bool)
    rest[layers.words] = False
    rest = mx.array(rest)
    spelling = layers.distilled[words] - layers.start[words]
    parts: list[tuple[np.ndarray, ...]] = []
    for begin in range(0, len(states), chunk):
        h = mx.array(states[begin:begin + chunk])
        full = h @ layers.start.T
        others = mx.where(rest[None, :], full / temperature, -mx.inf)
        arrays = (full[:, words], h @ spelling.T, h @ layers.direction, mx.logsumexp(others, axis=-1),
                  others.max(axis=-1),
                  mx.take_along_axis(full, mx.array(tokens[begin:begin + chunk])[:, None], axis=-1)[:, 0])
        mx.eval(*arrays)
        parts.append(tuple(np.array(a) for a in arrays))
    return tuple(np.concatenate(a) for a in zip(*parts))


def build_anchors(source: Source, model, layers: OutputGains, settings: OutputRLSettings) -> Anchors:
    """`anchor_rows` of the distill run's anchor rows (drawn with the seed), as cached arrays."""
    saved = read_arrays(source.folder / ANCHORS_FILE, "a distill anchors file", "run the distill run again")
    mids = saved["mids"]
    chosen = np.sort(np.random.default_rng(settings.seed).permutation(len(mids))[:settings.anchor_rows])
    own, spelled, along, rest_lse, rest_max, _ = row_arrays(final_states(model, mids[chosen]),
                                                            saved["tokens"][chosen], layers, settings.temperature)
    return Anchors(own, spelled, along, rest_lse, rest_max)


def build_split(positions: list[EndgamePosition], rows: Rows, model, layers: OutputGains, word_rows: np.ndarray,
                scorer: RewardScorer, temperature: float) -> Split:
    """A split's cached arrays: the rows' final states through the start's and the distilled layers,
    and the reward kernel's score of every word at each position."""
    own, spelled, along, rest_lse, _, target = row_arrays(final_states(model, rows.mids), rows.tokens, layers,
                                                          temperature)
    index = {int(t): i for i, t in enumerate(layers.words)}
    first = np.flatnonzero(np.r_[True, rows.owners[1:] != rows.owners[:-1]])
    target_word = np.array([index.get(int(t), -1) for t in rows.tokens], np.int64)
    counts = np.bincount(rows.owners, minlength=len(positions))
    rewards = np.stack([np.maximum(scorer.score_rows(word_rows, p.state, p.secret), 0.0) for p in positions])
    secret_rows = np.array([scorer.setup.lists.index(p.secret) for p in positions])
    win = np.array([max(float(scorer.score_rows(secret_rows[i:i + 1], p.state, p.secret)[0]), 0.0)
                    for i, p in enumerate(positions)])
    others = np.where(word_rows[None, :] == secret_rows[:, None], np.nan, rewards)
    return Split(own, spelled, along, rest_lse, target, target_word, rows.owners, first, rewards.astype(np.float32),
                 win.astype(np.float32), np.nanmean(others, axis=1).astype(np.float32),
                 (counts > 1).astype(np.float32))


def naming_direction(model, rows: Rows) -> mx.array:
    """u: the mean final state at ` Only` over the training positions, scaled so that u . h is 1 on
    average there: the bias reads as a constant where the model names a word."""
    first = np.r_[True, rows.owners[1:] != rows.owners[:-1]]
    states = final_states(model, rows.mids[first])
    mean = states.mean(axis=0)
    return mx.array(mean / float((states @ mean).mean()))


def readings(gains: dict[str, mx.array], splits: dict[str, Split], secret_words: mx.array,
             temperature: float) -> dict[str, dict[str, float]]:
    """Each split's mean expected reward and mean probability of naming the secret (the expected win)."""
    out = {}
    for name, split in splits.items():
        reward, p_win = expected(gains, split, secret_words, temperature)
        out[name] = {"reward": round(float(reward.mean()), 5), "win": round(float(p_win.mean()), 5)}
    return out


@dataclass(frozen=True)
class Prepared:
    """Everything the steps read: each split's cached arrays, the layers, which words are secrets."""
    positions: dict[str, list[EndgamePosition]]
    splits: dict[str, Split]
    layers: OutputGains
    secret_mask: mx.array
    anchors: Anchors


def prepare(source: Source, folder: Path, own_games: tuple[str, ...], own_validation: tuple[str, ...],
            settings: OutputRLSettings, show_progress: bool) -> Prepared:
    """The own games' states, then every split's arrays through the start's and the distilled layers."""
    positions, rows, _, teacher = gather_own(source, folder, own_games, own_validation, settings.turns == "every",
                                             show_progress)
    if not positions["own"] or not positions["own_validation"]:
        raise UserError("the own games hold no answer that names its word at the chosen --turns: play more games")
    model = teacher.model
    distilled_model = load_policy(str(source.folder / "model"), None, AdapterSettings(), "float32").model
    setup = load_setup("answers")
    spelling = token_spelling(teacher.tokenizer, output_weight(model).shape[0], "words",
                              frozenset(setup.lists.allowed))
    words = np.flatnonzero(spelling.any(axis=1))
    if not len(words):
        raise UserError("the model's tokenizer has no token that is a whole allowed word (a space and its five "
                        "letters): its output layer has no word rows for output-rl to weigh")
    names = [teacher.tokenizer.decode([int(t)])[1:] for t in words]
    secret_set = set(setup.start.secret_words)
    secret_words = np.array([w in secret_set for w in names])
    layers = OutputGains(output_weight(model).astype(mx.float32), output_weight(distilled_model).astype(mx.float32),
                         words, secret_words, naming_direction(model, rows["own"]))
    scorer = RewardScorer(setup)
    word_rows = np.array([setup.lists.index(w) for w in names], np.int64)
    splits = {name: build_split(positions[name], rows[name], model, layers, word_rows, scorer, settings.temperature)
              for name in ("own", "own_validation", "validation")}
    return Prepared(positions, splits, layers, mx.array(secret_words.astype(np.float32)),
                    build_anchors(source, model, layers, settings))


def run_output_rl(distilled: str, out: str, settings: OutputRLSettings, own_games: tuple[str, ...],
                  own_validation: tuple[str, ...], show_progress: bool = True) -> dict:
    """`output-rl`: the own games' states (resumed from OUT/states.npz), the cached arrays, the
    gains' steps (the best on the own validation positions' expected win), then OUT/model."""
    if not own_games or not own_validation:
        raise UserError("output-rl trains at its own games' positions: give --own-games (training secrets) and "
                        "--own-validation (validation secrets), eval --json files of the distilled model's games")
    source = Source.of(distilled)
    folder = Path(out)
    record = {"distilled": str(Path(distilled).resolve()), "own_contexts": OWN_CONTEXTS, "turns": settings.turns}
    if (folder / RUN_FILE).exists() and read_json(folder / RUN_FILE, "output-rl settings") != record:
        raise UserError(f"{folder} is an output-rl run of another --distilled or --turns, or its states were read "
                        f"after other text (its {RUN_FILE} says which): choose another --out")
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / RUN_FILE, record)
    began = time.perf_counter()
    prepared = prepare(source, folder, own_games, own_validation, settings, show_progress)
    read, layers, secret_mask = prepared.splits, prepared.layers, prepared.secret_mask
    cached = time.perf_counter()
    gains = initial_gains()
    optimizer = optim.Adam(learning_rate=settings.lr)

    def loss_fn(params):
        reward, _ = expected(params, read["own"], secret_mask, settings.temperature)
        return -reward.mean() + settings.kl_coef * anchor_kl(params, prepared.anchors, secret_mask,
                                                             settings.temperature)

    loss_and_grad = mx.value_and_grad(loss_fn)
    (folder / METRICS_FILE).unlink(missing_ok=True)

    def reading(step: int) -> dict:
        point = {"step": step, **{k: round(float(v), 5) for k, v in gains.items()},
                 **readings(gains, read, secret_mask, settings.temperature),
                 "anchor_kl": round(float(anchor_kl(gains, prepared.anchors, secret_mask, settings.temperature)), 6),
                 "anchor_same": anchor_agreement(gains, prepared.anchors, secret_mask, settings.temperature)}
        append_line(folder / METRICS_FILE, json.dumps(point))
        return point

    curve = [reading(0)]
    best = {**curve[0], "gains": dict(gains)}
    for step in range(1, settings.steps + 1):
        _, grads = loss_and_grad(gains)
        gains = optimizer.apply_gradients(grads, gains)
        mx.eval(gains, optimizer.state)
        if not all(np.isfinite(float(v)) for v in gains.values()):
            raise UserError(f"step {step}: a gain is not finite (lower --lr); nothing was written")
        if step % settings.eval_every == 0 or step == settings.steps:
            point = reading(step)
            curve.append(point)
            if (point["own_validation"]["reward"], point["own_validation"]["win"]) > \
                    (best["own_validation"]["reward"], best["own_validation"]["win"]):
                best = {**point, "gains": dict(gains)}
    chosen = best.pop("gains")

    def build(tmp: Path) -> None:
        shutil.copytree(source.folder / "model", tmp, dirs_exist_ok=True)
        write_output_layer(tmp, layers.merged(chosen))
        record_path = tmp / RECORD
        if record_path.exists():
            record = read_json(record_path, "the export record")
            record["output_layer"] = (f"spelled, then three gains tuned by output-rl in {folder} "
                                      f"({', '.join(f'{k} {float(v):.3f}' for k, v in chosen.items())})")
            atomic_write_json(record_path, record)

    atomic_replace_dir(folder / "model", build)
    summary = {"distilled": str(source.folder), "settings": asdict(settings), "own_games": list(own_games),
               "own_validation": list(own_validation), "written": str(folder / "model"),
               "positions": {name: len(prepared.positions[name]) for name in read}, "words": len(layers.words),
               "secret_words": int(layers.secret_words.sum()), "curve": curve, "best": best,
               "cache_seconds": round(cached - began, 1),
               "fit_seconds": round(time.perf_counter() - cached, 1)}
    atomic_write_json(folder / SUMMARY_FILE, summary)
    return summary


def summary_line(summary: dict) -> str:
    start, best = summary["curve"][0], summary["best"]
    return (f"output-rl (step {best['step']} of {summary['settings']['steps']}, {summary['positions']['own']} own "
            f"training answers, --turns {summary['settings']['turns']}): at its own validation games' answers the "
            f"expected reward {start['own_validation']['reward']:.3f} -> {best['own_validation']['reward']:.3f} and "
            f"the probability of naming the secret {start['own_validation']['win']:.3f} -> "
            f"{best['own_validation']['win']:.3f}, at the solver's "
            f"validation positions {start['validation']['win']:.3f} -> {best['validation']['win']:.3f}, at its "
            f"training positions {start['own']['win']:.3f} -> {best['own']['win']:.3f}; gains beta "
            f"{best['beta']:.3f}, alpha {best['alpha']:.3f}, bias {best['bias']:.3f}; anchor rows' most likely token "
            f"unchanged {best['anchor_same']:.3f} (KL {best['anchor_kl']:.4f})")
