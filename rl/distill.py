"""Distil the naming head into the model: its last layer learns to name, token by token, what the head names.

The head (llm/naming_head.py) is a readout of the model's final state at ` Only` that scores every
allowed word by its first token's embedding and its spelling; it names held-out secrets the
model's own next token does not (the SFT start writes one of the ~2,000 answers it was taught).
But it plays only inside this toolkit. Here the model's own next-token distributions are trained
toward the head's, at every token of the word: at ` Only` the head's word distribution summed
over each word's first token, and after each of the secret's tokens the head's distribution over
the tokens that continue a word with that beginning (the way llm/word_steering.py names a word
token by token). A soft target over thousands of words, not the one secret: hard targets at a few
hundred positions taught recall (the answers list) or made-up words (the allowed list)
(results/endgame-sft/, results/endgame-allowed/). Teaching the first token alone opened words the
model then could not finish: made-up words rose from 14 to 45 of 400 answers
(results/distill-head/); the later tokens' targets put mass only on tokens that spell an
allowed word.

What learns is one of two parts, and the rest of the model stays the start's, which makes the
training cheap and exact: the state after the last layer's attention at every taught token
(` Only`, then the secret's tokens but its last) is computed once by the frozen model, and the fit
runs only what follows it on those rows. `--part output` (the default) trains a spelling term in
the output layer (llm/spelled_output.py: W + S P, S each token's letters): a token embedding does
not spell its token, so no change of the state can score "an `r` in the third place" across words
never seen as a secret, and the head generalises through exactly that term. The layer is then one
plain matrix, written as the `lm_head` of the start fused (OUT/model, an mlx-lm model folder that
`eval --model`, `mlx_lm.generate` and any runtime play). `--part mlp` trains a LoRA on the last
layer's MLP instead (its change at a token moves only that token's logits), zero on every other
projection, so OUT/best is an ordinary adapter over the start (rl/policy.py merged_adapter); it
learnt its training positions and not held-out ones (results/distill-word/). Whatever learns
changes the logits at every token, not only the taught ones: every token of a few hundred
positions' whole teacher answers (anchor rows) is held to the start's own distribution beside each
step, and `--spelled words` spells only the tokens that are a whole allowed word: spelling every
token made up words in play, and spelling every word's first token still opened made-up ones
(results/distill-words/). The head's targets come from the final state
at ` Only`. The positions are the solver's games on the allowed list's
training words (never a held-out one), each game's first position with one candidate left, the
teacher's true thought up to ` Only`: fresh ones, not the head's own fit positions (where it
learnt the answer). The solver's games rarely reach the states the model's own play does (its last
guess a near miss it then names again), so `--own-games` adds every position where the model
answered with one candidate left in its own games on training words, labelled by the head the
same way, and `--own-validation` (its games on validation words) chooses the epoch where it plays.

The figures, read every `eval_every` epochs on training positions, held-out validation positions
(the answer list's validation words, which choose the epoch) and training answers' positions
(memory or skill): `top1`, the share where the model's most likely first token opens the secret;
`spells`, the share where its most likely token at every step spells the secret whole; `mean_p`,
the secret's mean probability as a word (the product over its tokens); the head's own beside them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models.base import create_attention_mask
from mlx_lm.tuner.lora import LoRALinear

from common.errors import UserError
from common.fileio import append_line, atomic_write, atomic_write_json, read_arrays, read_json
from common.knobs import knob, knob_like
from common.options import SEED
from common.progress import progress_bar
from eval.endgame import EndgamePosition, answered_positions, model_answers, teacher_positions
from eval.splits import held_out_validation, is_held_out, is_validation, trainable
from llm.cpu_streams import core_streams
from llm.generation import copy_cache, prefix_cache, shared_prefix_length
from llm.naming_head import NamingHead, head_beside
from llm.output_layer import output_layer, output_weight
from llm.spelled_output import SpelledOutput, one_token_words, token_spelling, write_output_layer
from llm.vector_exp import vector_exp
from llm.word_steering import WordTokens, head_scorer
from llm.format import prompt_tokens
from llm.histories import ENDGAME_CANDIDATES
from llm.tokenizing import tokens_after
from rl.naming_head import naming_context, one_candidate_positions
from sft.cot import truthful_answer
from rl.policy import load_policy
from sft.lora import AdapterSettings
from solver.setup import load_setup

SETTINGS_FILE = "distill.json"  # the run's settings, compared when it is run again
STATES_FILE = "states.npz"  # the frozen pass's states, saved as they grow: a killed run resumes
ANCHORS_FILE = "anchors.npz"  # the same for the anchor rows
ANCHOR_TOKENS = 64  # tokens kept of an anchor row's target: the start is sure of most answer tokens
METRICS_FILE = "metrics.jsonl"  # the figures at each reading
SAVE_EVERY = 32  # positions between saves of the states file
TARGET_TOKENS = 512  # tokens kept of each row's target (the head's most likely, renormalised): dense rows of a
#                      49k vocabulary for thousands of rows would take gigabytes, and the tail holds little mass
TRAINED = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")  # the last layer's LoRA that trains
SPLITS = ("train", "validation", "answers")  # fit positions, held-out readings, training answers' readings


@dataclass(frozen=True)
class DistillSettings:
    positions: int = knob(2000, "Training positions (fresh teacher positions of the allowed list's training words; "
                                "each costs one frozen model pass; 640 were learnt and carried a third, "
                                "results/distill-head/).", range=(1, 1_000_000), flag="--positions")
    validation_positions: int = knob(200, "Held-out validation positions (the answer list's validation words) "
                                          "that choose the epoch.", range=(1, 100_000),
                                     flag="--validation-positions")
    answer_positions: int = knob(100, "Training answers' positions read beside them (memory or skill).",
                                 range=(1, 100_000), flag="--answer-positions")
    epochs: int = knob(15, "Epochs over the training rows (one row a taught token).", range=(1, 1_000_000),
                       flag="--epochs")
    batch_size: int = knob(256, "Rows a step.", range=(1, 1_000_000), flag="--batch-size")
    part: str = knob("output", "What learns: 'output', a spelling term in the output layer (OUT/model, a fused "
                               "model), or 'mlp', a LoRA on the last layer's MLP (OUT/best, an adapter; it learnt its "
                               "training positions only, results/distill-word/).", choices=("output", "mlp"),
                     flag="--part")
    spelled: str = knob("words", "Which tokens the output layer spells (--part output): 'openings', a space and "
                                    "letters (a word's first token; the rest of the word stays the model's own), "
                                    "'all', continuing tokens too (which made up more words, results/distill-word/), "
                                    "or 'words', only tokens that are a whole allowed word (the term cannot open a "
                                    "made-up word; words of several tokens keep the model's own logits; chosen on "
                                    "validation games, results/distill-words/).",
                        choices=("openings", "all", "words"), flag="--spelled")
    whole_word_share: float | None = knob(None, "Share of the training positions whose secret the model writes as one "
                                                "token, the words --spelled words can lift (the allowed list's "
                                                "training words hold 16% such words for SmolLM2, the answers 57%); "
                                                "unset: every training word alike.", range=(0.0, 1.0),
                                          flag="--whole-word-share")
    anchor_positions: int = knob(200, "Positions whose whole teacher answers anchor every other token to the start's "
                                      "own distribution (0: none; without them the spelled layer broke 96% of "
                                      "answers, results/distill-word/).", range=(0, 100_000),
                                 flag="--anchor-positions")
    rank: int = knob(16, "LoRA rank (--part mlp).", range=(1, 1024), flag="--rank")
    scale: float = knob(20.0, "Multiplier of the LoRA update.", range=(0.0, 1000.0), open_low=True)
    lr: float = knob(1e-3, "Adam learning rate (for --part mlp 5e-5: faster rates learnt the training positions "
                           "sooner and no held-out ones, results/distill-word/).", range=(0.0, 1.0), open_low=True,
                     flag="--lr")
    own_repeat: int = knob(1, "Times each row of the model's own games (--own-games) is taught an epoch: a few hundred "
                              "positions beside thousands of the solver's.", range=(1, 1000), flag="--own-repeat")
    eval_every: int = knob(1, "Epochs between readings (the best on validation is kept).", range=(1, 1_000_000),
                           flag="--eval-every")
    seed: int = knob_like(SEED)


@dataclass(frozen=True)
class Rows:
    """One split's taught tokens: a row per token of each secret, the first at ` Only`."""
    mids: np.ndarray  # (rows, hidden) the state after the last layer's attention
    tokens: np.ndarray  # (rows,) the secret's token the row's logits should name
    owners: np.ndarray  # (rows,) the position each row belongs to

    @classmethod
    def empty(cls, hidden: int) -> Rows:
        return cls(np.zeros((0, hidden), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64))

    def then(self, more: Rows, first_owner: int) -> Rows:
        """These rows, then `more`, whose positions are numbered from `first_owner`."""
        return Rows(np.concatenate([self.mids, more.mids]), np.concatenate([self.tokens, more.tokens]),
                    np.concatenate([self.owners, more.owners + first_owner]))


@dataclass(frozen=True)
class Targets:
    """The head's next-token distribution at each row, cut to its `TARGET_TOKENS` most likely."""
    tokens: np.ndarray  # (rows, kept) token ids
    weights: np.ndarray  # (rows, kept) their probabilities, renormalised
    secret_p: np.ndarray  # (rows,) the head's probability of the secret's token, before the cut
    secret_top: np.ndarray  # (rows,) whether the secret's token is the head's most likely

    def then(self, more: Targets) -> Targets:
        """These rows' targets, then `more`'s."""
        return Targets(np.concatenate([self.tokens, more.tokens]), np.concatenate([self.weights, more.weights]),
                       np.concatenate([self.secret_p, more.secret_p]),
                       np.concatenate([self.secret_top, more.secret_top]))


class Teacher:
    """The frozen start and its head: at each position's taught tokens, the state after the last
    layer's attention, and the head's distributions over the next token there."""

    def __init__(self, model: nn.Module, tokenizer, head: NamingHead) -> None:
        self.model, self.tokenizer = model, tokenizer
        answers = load_setup("answers")
        self.vocabulary = WordTokens.of(tokenizer, answers.lists.allowed)
        self.index = {w: i for i, w in enumerate(self.vocabulary.words)}
        # The head as it plays: a head RL trained carries a bias toward the game's secret list (the
        # answer list, a rule of the game), which it adds there whatever the position's secret.
        self.score = head_scorer(model, head, self.vocabulary, answers.start.secret_words)

    def secret_tokens(self, position: EndgamePosition) -> tuple[int, ...]:
        return self.vocabulary.sequences[self.index[position.secret]]

    def context(self, position: EndgamePosition) -> list[int]:
        """What the model has read when it names the position's word: the prompt and the teacher's thought."""
        return naming_context(self.tokenizer, position)

    def states(self, positions: list[EndgamePosition]) -> tuple[Rows, np.ndarray]:
        """The rows of every position, and the final state at each ` Only` (positions, hidden)."""
        contexts = [self.context(p) + list(self.secret_tokens(p)[:-1]) for p in positions]
        tokens = [self.secret_tokens(p) for p in positions]
        return self._rows(contexts, tokens)

    def anchor_states(self, positions: list[EndgamePosition]) -> Rows:
        """A row at every token of each position's whole teacher answer (its thought, the guess and
        its tags): where the trained part must leave the start's own next token as it was."""
        answers = [tokens_after(self.tokenizer, "\n", [truthful_answer(p.state, p.secret)])[0] for p in positions]
        contexts = [prompt_tokens(self.tokenizer, p.state, p.rejected) + list(answer[:-1])
                    for p, answer in zip(positions, answers)]
        return self._rows(contexts, answers)[0]

    def _rows(self, contexts: list[list[int]], taught: list[tuple[int, ...]]) -> tuple[Rows, np.ndarray]:
        """The states after the last layer's attention at each context's last len(taught) tokens
        (rows naming the taught tokens), and the final state at the first of them.

        What every context opens with is run once and its cache shared; then each core runs one
        context at a time on a stream of its own (llm/cpu_streams.py, the head's states' way)."""
        hidden = self.model.args.hidden_size
        mids: list[np.ndarray] = [np.zeros((0, hidden), np.float32)] * len(contexts)
        finals: list[np.ndarray] = [np.zeros(hidden, np.float32)] * len(contexts)
        if contexts:
            shared = shared_prefix_length(contexts)
            with lora_off(self.model), vector_exp(self.model):
                prefix = prefix_cache(self.model, contexts[0][:shared])
                with core_streams() as streams:
                    for first in range(0, len(contexts), len(streams)):
                        wave = list(range(first, min(first + len(streams), len(contexts))))
                        passes = []
                        for stream, i in zip(streams, wave):
                            with mx.stream(stream):
                                passes.append(self._frozen_pass(prefix, contexts[i][shared:], len(taught[i])))
                        mx.eval(passes)
                        for i, (mid, final) in zip(wave, passes):
                            mids[i], finals[i] = np.array(mid), np.array(final)
        rows = Rows(np.concatenate(mids) if contexts else np.zeros((0, hidden), np.float32),
                    np.array([t for tokens in taught for t in tokens], np.int64),
                    np.repeat(np.arange(len(contexts)), [len(t) for t in taught]))
        return rows, np.stack(finals) if contexts else np.zeros((0, hidden), np.float32)

    def _frozen_pass(self, prefix: list, rest: list[int], taught: int) -> tuple[mx.array, mx.array]:
        """(taught, hidden) states after the last layer's attention at the context's last `taught`
        tokens, and the final state at the first of them (` Only`)."""
        inner = self.model.model
        caches = [copy_cache(layer, 1) for layer in prefix]
        h = inner.embed_tokens(mx.array([rest]))
        mask = create_attention_mask(h, caches[0] if caches else None)
        for layer, cache in zip(inner.layers[:-1], caches or [None] * len(inner.layers)):
            h = layer(h, mask, cache=cache)
        last = inner.layers[-1]
        mid = (h + last.self_attn(last.input_layernorm(h), mask, cache=caches[-1] if caches else None))[0, -taught:]
        naming = mid[:1]
        final = inner.norm(naming + last.mlp(last.post_attention_layernorm(naming)))[0]
        return mid.astype(mx.float32), final.astype(mx.float32)

    def targets(self, finals: np.ndarray, positions: list[EndgamePosition], rows: Rows) -> Targets:
        """At each row, the head's word distribution (words played or refused there banned, as in
        play) over the words that begin with the secret's tokens before the row, summed onto their
        next token."""
        logits = np.array(self.score(mx.array(finals)))
        padded = self.vocabulary.padded
        kept = min(TARGET_TOKENS, len(np.unique(self.vocabulary.first)))
        tokens = np.zeros((len(rows.tokens), kept), np.int64)
        weights = np.zeros((len(rows.tokens), kept), np.float32)
        secret_p, secret_top = np.zeros(len(rows.tokens), np.float32), np.zeros(len(rows.tokens), bool)
        row = 0
        for i, position in enumerate(positions):
            banned = [*position.state.guesses, *(r.guess for r in position.rejected)]
            scores = logits[i].astype(np.float64)
            scores[[self.index[w] for w in banned if w in self.index]] = -np.inf
            p = np.exp(scores - scores.max())
            secret = self.secret_tokens(position)
            live = np.flatnonzero(p > 0)
            for depth, token in enumerate(secret):
                live = live[padded[live, depth] >= 0]
                mass = np.bincount(padded[live, depth], weights=p[live], minlength=1)
                if mass.sum() <= 0:
                    mass = np.zeros(token + 1)
                    mass[token] = 1.0
                mass /= mass.sum()
                secret_p[row] = mass[token] if token < len(mass) else 0.0
                secret_top[row] = int(mass.argmax()) == token
                order = np.argsort(-mass)[:kept]
                tokens[row, :len(order)], weights[row, :len(order)] = order, mass[order]
                weights[row] /= weights[row].sum()
                live = live[padded[live, depth] == token]
                row += 1
        return Targets(tokens, weights, secret_p, secret_top)


@contextmanager
def lora_off(model: nn.Module) -> Iterator[None]:
    """The model without its LoRA updates inside the block (their scales 0): the frozen teacher."""
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    scales = [m.scale for m in layers]
    for m in layers:
        m.scale = 0.0
    try:
        yield
    finally:
        for m, s in zip(layers, scales):
            m.scale = s


def naming_logits(model: nn.Module, mids: mx.array) -> mx.array:
    """Next-token logits from the states after the last layer's attention, through its MLP (and
    LoRA) and the output layer: what the model itself writes next there."""
    last = model.model.layers[-1]
    out = mids + last.mlp(last.post_attention_layernorm(mids))
    return output_layer(model)(model.model.norm(out)).astype(mx.float32)


def distill_loss(logits: mx.array, tokens: mx.array, weights: mx.array) -> mx.array:
    """Cross-entropy from the head's next-token distribution (its kept tokens) to the model's logits."""
    log_p = nn.log_softmax(logits, axis=-1)
    return -(weights * mx.take_along_axis(log_p, tokens, axis=-1)).sum(axis=-1).mean()


def word_figures(secret_p: np.ndarray, secret_top: np.ndarray, owners: np.ndarray) -> dict[str, float]:
    """`top1`: the share of positions whose most likely first token opens the secret; `spells`: whose
    most likely token at every step is the secret's; `mean_p`: the secret's mean probability as a
    word (the product of its tokens')."""
    count = int(owners.max()) + 1 if len(owners) else 0
    first = np.r_[True, owners[1:] != owners[:-1]] if len(owners) else np.zeros(0, bool)
    log_p = np.bincount(owners, weights=np.log(np.maximum(secret_p, 1e-30)), minlength=count)
    misses = np.bincount(owners, weights=~secret_top, minlength=count)
    return {"top1": round(float(np.mean(secret_top[first])), 5), "spells": round(float(np.mean(misses == 0)), 5),
            "mean_p": round(float(np.mean(np.exp(log_p))), 5)}


class Student:
    """What the fit trains and how it makes a row's logits: `--part output`, the spelled output
    layer (llm/spelled_output.py) on the frozen start's final state; `--part mlp`, the LoRA of the
    last layer's MLP on the state after its attention."""

    def __init__(self, policy, part: str, spelled: str) -> None:
        self.policy, self.part = policy, part
        if part == "mlp":
            self.module = policy.model
        else:
            weight = output_weight(policy.model).astype(mx.float32)
            words = frozenset(load_setup("answers").lists.allowed) if spelled == "words" else frozenset()
            spelling = token_spelling(policy.tokenizer, weight.shape[0], spelled, words)
            self.module = SpelledOutput(weight, mx.array(spelling))

    def inputs(self, rows: Rows) -> np.ndarray:
        return rows.mids if self.part == "mlp" else final_states(self.policy.model, rows.mids)

    def logits(self, module: nn.Module, inputs: mx.array) -> mx.array:
        return naming_logits(module, inputs) if self.part == "mlp" else module(inputs)

    def trained(self) -> dict[str, mx.array]:
        return dict(tree_flatten(self.module.trainable_parameters()))

    def write(self, folder: Path, model_spec: str, adapter: str, dtype: str) -> Path:
        """The trained model: `best/`, an adapter over the start (mlp), or `model/`, the start fused
        with the spelled output layer as its `lm_head` (output)."""
        if self.part == "mlp":
            self.policy.export(folder / "best")
            return folder / "best"
        from sft.export import RECORD, export_model

        out = folder / "model"
        export_model(model_spec, Path(adapter), out, dtype)
        write_output_layer(out, self.module.merged())
        record = read_json(out / RECORD, "the export record")
        record["output_layer"] = f"spelled (llm/spelled_output.py), fitted by distill in {folder}"
        atomic_write_json(out / RECORD, record)
        return out


def final_states(model: nn.Module, mids: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """The frozen start's final (normed) states at the rows, from the states after the last layer's attention."""
    last, finals = model.model.layers[-1], []
    with lora_off(model):
        for start in range(0, len(mids), chunk):
            h = mx.array(mids[start:start + chunk])
            final = model.model.norm(h + last.mlp(last.post_attention_layernorm(h)))
            mx.eval(final)
            finals.append(np.array(final.astype(mx.float32)))
    return np.concatenate(finals) if finals else np.zeros_like(mids)


def chunked_logits(student: Student, inputs: np.ndarray, chunk: int = 512) -> Iterator[tuple[slice, mx.array]]:
    """The student's logits at the rows, a chunk at a time (a whole split's would take gigabytes)."""
    for start in range(0, len(inputs), chunk):
        rows = slice(start, start + chunk)
        yield rows, student.logits(student.module, mx.array(inputs[rows]))


def model_figures(student: Student, inputs: np.ndarray, rows: Rows) -> dict[str, float]:
    """`word_figures` of the student's own next-token distributions at the rows."""
    secret_p, secret_top = [], []
    for chunk, logits in chunked_logits(student, inputs):
        tokens = mx.array(rows.tokens[chunk])[:, None]
        p = mx.take_along_axis(mx.softmax(logits, axis=-1), tokens, axis=-1)[:, 0]
        top = logits.argmax(axis=-1) == tokens[:, 0]
        mx.eval(p, top)
        secret_p.append(np.array(p))
        secret_top.append(np.array(top))
    return word_figures(np.concatenate(secret_p), np.concatenate(secret_top), rows.owners)


def distill_positions(settings: DistillSettings, tokenizer) -> dict[str, list[EndgamePosition]]:
    """Training positions on the allowed list's training words (seeded apart from the head's fit),
    held-out validation positions, and training answers' positions."""
    answers = load_setup("answers")
    seed = settings.seed * 1_000_003 + 17
    return {"train": training_positions(settings, tokenizer, seed),
            "validation": one_candidate_positions(answers, sorted(held_out_validation(answers.lists.answers)),
                                                  settings.validation_positions, seed + 1),
            "answers": one_candidate_positions(answers, sorted(trainable(answers.lists.answers)),
                                               settings.answer_positions, seed + 2)}


def training_positions(settings: DistillSettings, tokenizer, seed: int) -> list[EndgamePosition]:
    """Positions of the allowed list's training words; with `whole_word_share` set, that share of
    them on the words the model writes as one token. Only those can a whole-word spelling term
    lift, and the allowed list holds few of them: drawn alike, five positions in six teach the
    term only what not to name, while most of the game's secrets are such words."""
    allowed = load_setup("allowed")
    words = sorted(trainable(allowed.lists.allowed))
    if settings.whole_word_share is None:
        return one_candidate_positions(allowed, words, settings.positions, seed)
    whole = set(one_token_words(tokenizer, frozenset(words)).values())
    count = round(settings.whole_word_share * settings.positions)
    one_token, longer = [w for w in words if w in whole], [w for w in words if w not in whole]
    if (count and not one_token) or (count < settings.positions and not longer):
        raise UserError(f"--whole-word-share {settings.whole_word_share} asks for words this tokenizer does not "
                        f"have ({len(one_token)} training words of one token, {len(longer)} longer)")
    return (one_candidate_positions(allowed, one_token, count, seed + 3)
            + one_candidate_positions(allowed, longer, settings.positions - count, seed + 4))


def anchor_positions(settings: DistillSettings) -> list[EndgamePosition]:
    """Positions of games on training answers, half in the endgame (1-6 candidates left) and half
    earlier (up to 200), whose whole answers anchor the start's own tokens."""
    answers = load_setup("answers")
    words, seed = sorted(trainable(answers.lists.answers)), settings.seed * 1_000_003 + 21
    half = settings.anchor_positions // 2
    solver = answers.solver()
    return (teacher_positions(answers, solver, words, half, seed, max_candidates=ENDGAME_CANDIDATES)
            + teacher_positions(answers, solver, words, settings.anchor_positions - half, seed + 1, max_candidates=200))


def own_positions(paths: tuple[str, ...], split: str) -> list[EndgamePosition]:
    """Every position where the model answered with one candidate left in its own games (eval JSONs,
    refusals shown there included), each once: the states its own play reaches, which the solver's
    games do not (it names its last guess again there, results/distill-own/). `own`: games on
    training secrets only; `own_validation`: on held-out validation secrets only."""
    return [position for position, _ in own_answers(paths, split)]


def own_answers(paths: tuple[str, ...], split: str, every_turn: bool = False) -> list[tuple[EndgamePosition, dict]]:
    """`own_positions`, each with the move record of the model's first answer there (its text);
    `every_turn`: at every position it answered, the opening included, not only with one left."""
    answers = load_setup("answers")
    allowed_here = (lambda w: not is_held_out(w)) if split == "own" else is_validation
    flag, where = ("--own-games", "training words (eval --split train or untaught)") if split == "own" else (
        "--own-validation", "held-out validation words (eval --split validation)")
    found: dict[str, tuple[EndgamePosition, dict]] = {}
    for path in paths:
        result = read_json(path, f"{flag} games file")
        if not isinstance(result.get("per_game"), list) or not result["per_game"]:
            raise UserError(f"{flag} {path} holds no per-game records: give the --json file of an eval")
        if result.get("secrets", "answers") != "answers":
            raise UserError(f"{flag} {path}: its secrets are the {result.get('secrets')} list; play the answer list's")
        outside = sorted({g.get("secret") for g in result.get("per_game", []) if not allowed_here(g.get("secret", ""))})
        if outside:
            raise UserError(f"{flag} {path} has games on {len(outside)} secrets that are not {where}, "
                            f"e.g. {outside[0]!r}")
        answered = (answered_positions(answers, result) if every_turn
                    else model_answers(answers, result, max_candidates=1))
        for position, move in answered:
            found.setdefault(position.key, (position, move))
    return list(found.values())


def trainable_model(model_spec: str, adapter: str, settings: DistillSettings, dtype: str):
    """The start fused, a LoRA on every projection, and only the last layer's MLP LoRA trainable."""
    mx.random.seed(settings.seed)
    policy = load_policy(model_spec, adapter, AdapterSettings(rank=settings.rank, scale=settings.scale), dtype)
    last = policy.model.model.layers[-1]
    if not all(hasattr(last, name) for name in ("mlp", "self_attn", "input_layernorm", "post_attention_layernorm")):
        raise UserError(f"distill reads a llama-style last layer (self_attn, mlp and their norms); --model "
                        f"{model_spec}'s is a {type(last).__name__}")
    policy.model.freeze()
    for name in TRAINED:
        module = last
        for part in name.split("."):
            module = getattr(module, part)
        module.unfreeze(keys=["lora_a", "lora_b"], strict=False)
    return policy


def run_distill(model_spec: str, adapter: str, out: str, settings: DistillSettings, dtype: str = "auto",
                show_progress: bool = True, own_games: tuple[str, ...] = (), own_validation: tuple[str, ...] = ()
                ) -> dict:
    """`distill`: the frozen pass over every position (resumed from OUT/states.npz), then the fit.
    Positions of the model's own games (`own_games`, training secrets) join the training rows;
    those on validation secrets (`own_validation`) choose the epoch in place of the solver's."""
    folder = Path(out)
    head_file = head_beside(adapter)
    if head_file is None:
        raise UserError(f"--adapter {adapter} has no naming head beside it: fit one with naming-head first")
    head = NamingHead.load(head_file)
    own = {"own": own_positions(own_games, "own"), "own_validation": own_positions(own_validation, "own_validation")}
    began = time.perf_counter()
    policy = trainable_model(model_spec, adapter, settings, dtype)
    splits = {**distill_positions(settings, policy.tokenizer), **own}
    _check_settings(folder, model_spec, adapter, settings)
    teacher = Teacher(policy.model, policy.tokenizer, head)
    rows, finals = gather(folder / STATES_FILE, teacher, splits, show_progress)
    gathered = time.perf_counter()
    targets = {name: teacher.targets(finals[name], splits[name], rows[name]) for name in splits}
    anchors = _gather_anchors(folder / ANCHORS_FILE, teacher, anchor_positions(settings), show_progress)
    student = Student(policy, settings.part, settings.spelled)
    read = {name: rows[name] for name in splits if len(splits[name])}
    fitted = rows["train"], targets["train"]
    for copy in range(settings.own_repeat):
        fitted = (fitted[0].then(rows["own"], len(splits["train"]) + copy * len(splits["own"])),
                  fitted[1].then(targets["own"]))
    curve, best = _fit(student, read, fitted, anchors, settings, folder, show_progress)
    student.module.load_weights(list(best.pop("weights").items()), strict=False)
    written = student.write(folder, model_spec, adapter, dtype)
    summary = {"model": model_spec, "adapter": adapter, "head": str(head_file), "settings": asdict(settings),
               "own_games": list(own_games), "own_validation": list(own_validation), "written": str(written),
               "chosen_by": chooser(read),
               "positions": {name: len(splits[name]) for name in read},
               "rows": {**{name: len(read[name].tokens) for name in read}, "anchor": len(anchors.tokens),
                        "fitted": len(fitted[0].tokens)},
               "head_figures": {name: word_figures(targets[name].secret_p, targets[name].secret_top,
                                                   rows[name].owners) for name in read},
               "curve": curve, "best": best, "states_seconds": round(gathered - began, 1),
               "fit_seconds": round(time.perf_counter() - gathered, 1)}
    atomic_write_json(folder / "summary.json", summary)
    return summary


def chooser(read: dict[str, Rows]) -> str:
    """The split whose figures choose the epoch: the model's own validation games' positions when
    given (where it plays), else the solver's validation positions."""
    return "own_validation" if "own_validation" in read else "validation"


def _fit(student: Student, read: dict[str, Rows], fitted: tuple[Rows, Targets], anchors: Rows,
         settings: DistillSettings, folder: Path, show_progress: bool) -> tuple[list[dict], dict]:
    """Adam over shuffled batches of the training rows (`fitted`), each step beside a batch of anchor
    rows held to the start's own distribution; the epoch best on validation (the secret's mean word
    probability, then the share spelt) at the `chooser`'s split. `read`: the splits read each time."""
    inputs = {name: student.inputs(rows) for name, rows in read.items()}
    train, targets = fitted
    train_inputs = student.inputs(train)
    anchor_inputs = student.inputs(anchors)
    anchor_targets = start_targets(student, anchor_inputs)
    anchor_order = np.random.default_rng(settings.seed + 1).permutation(len(anchors.tokens))
    chosen_by = chooser(read)

    def loss_fn(module, x, tokens, weights, anchor_x, anchor_tokens, anchor_weights):
        loss = distill_loss(student.logits(module, x), tokens, weights)
        if anchor_x.shape[0]:
            loss = loss + distill_loss(student.logits(module, anchor_x), anchor_tokens, anchor_weights)
        return loss

    loss_and_grad = nn.value_and_grad(student.module, loss_fn)
    optimizer = optim.Adam(learning_rate=settings.lr)
    order_rng = np.random.default_rng(settings.seed)

    def reading(epoch: int, loss: float | None) -> dict:
        point = {"epoch": epoch, "loss": None if loss is None else round(loss, 5)}
        point.update({name: model_figures(student, inputs[name], read[name]) for name in read})
        point["anchor_top1"] = anchor_agreement(student, anchor_inputs, anchors)
        append_line(folder / METRICS_FILE, json.dumps(point))
        return point

    def rank(point: dict) -> tuple[float, float]:
        return point[chosen_by]["mean_p"], point[chosen_by]["spells"]

    curve = [reading(0, None)]
    best = {**curve[0], "weights": student.trained()}
    steps = -(-len(train.tokens) // settings.batch_size)
    with progress_bar("steps", disable=not show_progress) as progress:
        task = progress.add_task("distill fit", total=settings.epochs * steps)
        for epoch in range(1, settings.epochs + 1):
            order, losses = order_rng.permutation(len(train.tokens)), []
            for start in range(0, len(order), settings.batch_size):
                chosen = order[start:start + settings.batch_size]
                step = start // settings.batch_size + (epoch - 1) * steps
                held = np.take(anchor_order, np.arange(step * settings.batch_size, (step + 1) * settings.batch_size),
                               mode="wrap") if len(anchor_order) else np.zeros(0, np.int64)
                loss, grads = loss_and_grad(student.module, mx.array(train_inputs[chosen]),
                                            mx.array(targets.tokens[chosen]), mx.array(targets.weights[chosen]),
                                            mx.array(anchor_inputs[held]), mx.array(anchor_targets[0][held]),
                                            mx.array(anchor_targets[1][held]))
                optimizer.update(student.module, grads)
                mx.eval(student.module.trainable_parameters(), optimizer.state, loss)
                if not np.isfinite(float(loss)):
                    raise UserError(f"epoch {epoch}: the loss is not finite (lower --lr); nothing was written")
                losses.append(float(loss) * len(chosen))
                progress.advance(task)
            if epoch % settings.eval_every == 0 or epoch == settings.epochs:
                point = reading(epoch, sum(losses) / len(order))
                curve.append(point)
                if rank(point) > rank(best):
                    best = {**point, "weights": student.trained()}
    return curve, best


def start_targets(student: Student, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The student's own next-token distribution before any step (the start's), cut to its
    `ANCHOR_TOKENS` most likely and renormalised: (tokens, weights) at each row."""
    tokens, weights = [], []
    for _, logits in chunked_logits(student, inputs):
        p = mx.softmax(logits, axis=-1)
        top = mx.argpartition(-p, ANCHOR_TOKENS, axis=-1)[:, :ANCHOR_TOKENS]
        kept = mx.take_along_axis(p, top, axis=-1)
        mx.eval(top, kept)
        tokens.append(np.array(top))
        weights.append(np.array(kept / kept.sum(axis=-1, keepdims=True)))
    if not tokens:
        return np.zeros((0, ANCHOR_TOKENS), np.int64), np.zeros((0, ANCHOR_TOKENS), np.float32)
    return np.concatenate(tokens), np.concatenate(weights)


def anchor_agreement(student: Student, inputs: np.ndarray, anchors: Rows) -> float | None:
    """The share of anchor rows where the student's most likely token is the teacher's answer's."""
    if not len(anchors.tokens):
        return None
    hits = 0
    for chunk, logits in chunked_logits(student, inputs):
        hits += int((np.array(logits.argmax(axis=-1)) == anchors.tokens[chunk]).sum())
    return round(hits / len(anchors.tokens), 5)


def _gather_anchors(path: Path, teacher: Teacher, positions: list[EndgamePosition], show_progress: bool) -> Rows:
    """The anchor rows: those in `path` first, then the rest, saved as they grow."""
    hidden = teacher.model.args.hidden_size
    saved = read_arrays(path, "a distill anchors file", "delete it to start again") if path.exists() else {}
    keys = [str(k) for k in saved.get("keys", [])]
    if keys != [p.key for p in positions[:len(keys)]]:
        raise UserError(f"{path} holds other anchor positions: delete it to start again")
    rows = Rows(saved["mids"], saved["tokens"], saved["owners"]) if saved else Rows.empty(hidden)
    done = len(keys)
    with progress_bar("positions", disable=not show_progress or done >= len(positions)) as progress:
        task = progress.add_task("anchor pass", total=len(positions) - done)
        while done < len(positions):
            batch = positions[done:done + SAVE_EVERY]
            rows = rows.then(teacher.anchor_states(batch), done)
            added = len(batch)
            done += added
            arrays = {"mids": rows.mids, "tokens": rows.tokens, "owners": rows.owners,
                      "keys": np.array([p.key for p in positions[:done]])}
            atomic_write(path, lambda tmp, arrays=arrays: _savez(tmp, arrays))
            progress.advance(task, added)
    return rows


def _savez(tmp: str, arrays: dict[str, np.ndarray]) -> None:
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)


def gather(path: Path, teacher: Teacher, splits: dict[str, list[EndgamePosition]],
            show_progress: bool) -> tuple[dict[str, Rows], dict[str, np.ndarray]]:
    """Every split's rows and ` Only` states: those in `path` first, then the rest, saved as they
    grow. The own games' splits are cheap and may change between runs: fewer games keep the
    beginning of the saved rows, more are passed on from them, and other games are passed anew."""
    hidden = teacher.model.args.hidden_size
    saved = read_arrays(path, "a distill states file", "delete it to start again") if path.exists() else {}
    if saved and any(f"{name}_owners" not in saved for name in SPLITS):
        raise UserError(f"{path} holds another form of distill states (the first token's only): delete it to "
                        "start again")
    rows: dict[str, Rows] = {}
    finals: dict[str, np.ndarray] = {}
    for name in splits:
        keys = [str(k) for k in saved.get(f"{name}_keys", [])]
        kept = len(keys) if name in SPLITS else min(len(keys), len(splits[name]))  # fewer own games: a beginning
        fits = keys[:kept] == [p.key for p in splits[name][:len(keys)]] and (
            f"{name}_mid" not in saved or saved[f"{name}_mid"].shape[1:] == (hidden,))
        if not fits and name in SPLITS:
            raise UserError(f"{path} holds other positions or another model's states: delete it to start again")
        if fits and f"{name}_owners" in saved:
            owned = saved[f"{name}_owners"] < kept
            rows[name] = Rows(*(saved[f"{name}_{part}"][owned] for part in ("mid", "tokens", "owners")))
            finals[name] = saved[f"{name}_final"][:kept]
        else:
            rows[name], finals[name] = Rows.empty(hidden), np.zeros((0, hidden), np.float32)
    missing = sum(len(splits[name]) - len(finals[name]) for name in splits)
    with progress_bar("positions", disable=not show_progress or not missing) as progress:
        task = progress.add_task("frozen pass", total=missing)
        for name in splits:
            while len(finals[name]) < len(splits[name]):
                done = len(finals[name])
                more, final = teacher.states(splits[name][done:done + SAVE_EVERY])
                rows[name] = rows[name].then(more, done)
                finals[name] = np.concatenate([finals[name], final])
                _save_states(path, rows, finals, splits)
                progress.advance(task, len(final))
    return rows, finals


def _save_states(path: Path, rows: dict[str, Rows], finals: dict[str, np.ndarray],
                 splits: dict[str, list[EndgamePosition]]) -> None:
    arrays = {}
    for name in splits:
        arrays[f"{name}_mid"], arrays[f"{name}_final"] = rows[name].mids, finals[name]
        arrays[f"{name}_tokens"], arrays[f"{name}_owners"] = rows[name].tokens, rows[name].owners
        arrays[f"{name}_keys"] = np.array([p.key for p in splits[name][:len(finals[name])]])

    atomic_write(path, lambda tmp: _savez(tmp, arrays))


def _check_settings(folder: Path, model_spec: str, adapter: str, settings: DistillSettings) -> None:
    """A new run records its settings; one run again must hold the same positions (only the fit's
    settings may change: the states are what a rerun reuses)."""
    record = {"model": model_spec, "adapter": str(adapter), **asdict(settings)}
    path = folder / SETTINGS_FILE
    fixed = ("model", "adapter", "positions", "validation_positions", "answer_positions", "whole_word_share", "seed")
    if path.exists():
        saved = read_json(path, "distill settings")
        changed = [k for k in fixed if saved.get(k) != record[k]]
        if changed:
            raise UserError(f"{folder} is a distill run with {changed[0]} {saved.get(changed[0])!r}, not "
                            f"{record[changed[0]]!r}: run it as it was started, or choose another --out")
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)


def summary_line(summary: dict) -> str:
    """One line: how often the plain model's most likely tokens spell the secret at held-out
    validation and training answers' positions, before and at the chosen epoch, beside the head's
    (and at its own validation games' positions, when those chose the epoch)."""
    start, best, head = summary["curve"][0], summary["best"], summary["head_figures"]
    own = "" if "own_validation" not in best else (
        f"; at its own validation games' one-candidate positions {start['own_validation']['spells']:.3f} -> "
        f"{best['own_validation']['spells']:.3f} (the head {head['own_validation']['spells']:.3f})")
    return (f"distill (epoch {best['epoch']} of {summary['settings']['epochs']}, {summary['positions']['train']:,} "
            f"positions + {summary['positions'].get('own', 0):,} of its own games): the model's own most likely "
            f"tokens spell the secret at held-out validation positions "
            f"{start['validation']['spells']:.3f} -> {best['validation']['spells']:.3f} (the head "
            f"{head['validation']['spells']:.3f}; its word probability {start['validation']['mean_p']:.3f} -> "
            f"{best['validation']['mean_p']:.3f}), training answers {start['answers']['spells']:.3f} -> "
            f"{best['answers']['spells']:.3f}, its training positions {start['train']['spells']:.3f} -> "
            f"{best['train']['spells']:.3f}{own}")
