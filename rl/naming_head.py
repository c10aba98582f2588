"""Fit a naming head (llm/naming_head.py): every word's reward at once, where the endgame is lost.

The SFT start reaches a one-candidate position in most games and names the word left in few
(results/endgame-rl/). Endgame GRPO samples 16 answers there and finds a held-out secret about
once in 40 (results/endgame-wins-only/): its updates are about the few words it won with. Here
every allowed word is scored at each position by the reward's `fit` (the share of the feedback
tiles so far it would have given as the secret: 1 for the words the clues leave; 0 for a word
already played, which the game refuses and the reward scores the floor), and the head is fitted
toward the closed-form optimum of KL-regularised reward maximisation at the naming token,

    q(w) ∝ p(w) * exp(fit(w) / beta),

p being the start's own scores (the head at zero), by the cross-entropy from q. Nothing rewards
a particular word, so memory cannot pay: the training positions are those of training words
(answers and allowed-only words), the epoch is chosen on held-out validation positions by the
secret's mean probability among all words, and test words are never read.

The model stays frozen, so its final hidden state at each position's naming token is computed
once (its longest part: 0.52 s a position on a 2-core CPU, results/passes/) and kept in a states
file, saved as it grows: a killed run resumes from the states it had, and a refit with another
beta reads them.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from common.errors import UserError, note
from common.fileio import atomic_write, atomic_write_json, check_writable_file, read_arrays
from common.knobs import knob, knob_like
from common.options import SEED
from common.progress import progress_bar
from eval.endgame import EndgamePosition, teacher_positions
from eval.splits import held_out_validation, trainable
from llm.cpu_streams import core_streams
from llm.format import NAMING_WORD, prompt_tokens
from llm.generation import copy_cache, prefix_cache, shared_prefix_length
from llm.naming_head import HEAD_FILE, NamingHead, naming_tokens, readout_logits
from llm.tokenizing import tokens_after
from llm.vector_exp import vector_exp
from llm.word_steering import WordTokens, word_basis
from rl.reward import fit_shares
from sft.cot import GUESS_SENTENCE, truthful_answer
from solver.setup import Setup, load_setup

RECORD_FILE = "naming_head.json"  # the fit's settings, curve and figures, beside the head
STATES_FILE = "naming_states.npz"  # the cached states, beside the head unless --states says otherwise
ORIGIN_KEY = "made_with"  # the states file's record of the model and adapter that made them (states_origin)
EVAL_EVERY = 20  # epochs between validation figures (the best of them is kept)
STATES_CHUNK = 32  # positions per saved piece of the states file
STATES_BATCH = 8  # positions per forward pass on one stream (contexts run 300-380 tokens)


@dataclass(frozen=True)
class HeadSettings:
    # Measured on a fit over 3,000 words: below 1e-38 the target's fit/beta overflows float32 and the fit
    # is NaN from its first epoch; from 1e-4 down to 1e-38 the target is the clues' alone and every figure
    # the same to 4 digits. So the range starts at 1e-6: nothing is lost, and far from where it breaks.
    beta: float = knob(0.01, "Temperature of the target p*exp(fit/beta): lower trusts the clues more "
                             "(0.01 was best on validation of 0.005-0.05).", range=(1e-6, 10), flag="--beta")
    rank: int = knob(64, "Rank of the head's correction of the state.", range=(1, 4096), flag="--rank")
    epochs: int = knob(200, "Full-batch epochs over the training positions.", range=(1, 100_000), flag="--epochs")
    lr: float = knob(1e-3, "AdamW learning rate.", range=(0, 1), open_low=True, flag="--lr")
    weight_decay: float = knob(1e-2, "AdamW weight decay.", range=(0, 10), flag="--weight-decay")
    positions: int = knob(2560, "One-candidate positions of training words to fit on (more closed more held-out "
                                "positions, results/head-scale/; each costs one model pass).",
                          range=(1, 1_000_000), flag="--positions")
    validation_positions: int = knob(100, "One-candidate positions of held-out validation words that choose "
                                          "the epoch.", range=(1, 1_000_000), flag="--validation-positions")
    seed: int = knob_like(SEED)


def naming_context(tokenizer, position: EndgamePosition) -> list[int]:
    """The prompt and the teacher's true thought up to and with ` Only`: the next token names the word.
    The thought's tokens are those the model writes after the prompt (llm/tokenizing.py)."""
    answer = truthful_answer(position.state, position.secret)
    cut = answer.rindex(f" {NAMING_WORD} ")
    return (prompt_tokens(tokenizer, position.state, position.rejected)
            + list(tokens_after(tokenizer, "\n", [answer[:cut]])[0])
            + list(naming_tokens(tokenizer)))


def said_context(tokenizer, position: EndgamePosition, text: str) -> list[int] | None:
    """The prompt and the model's own answer `text` up to where it writes the word it plays: through
    ` Only` when it names one candidate left, else up to the sentence that gives its guess's bits
    ("... crane: 5.8 bits"). None where it writes neither. In play the word is chosen from the
    state after what the model wrote, which may misread a clue or miscount the candidates; the
    teacher's thought (`naming_context`) never does (results/output-rl/)."""
    prompt = prompt_tokens(tokenizer, position.state, position.rejected)
    naming = f" {NAMING_WORD} "
    if naming in text:
        cut = text.rindex(naming)
        return prompt + list(tokens_after(tokenizer, "\n", [text[:cut]])[0]) + list(naming_tokens(tokenizer))
    sentences = list(GUESS_SENTENCE.finditer(text))
    if sentences:
        return prompt + list(tokens_after(tokenizer, "\n", [text[:sentences[-1].start()]])[0])
    return None


def one_candidate_positions(setup: Setup, words: list[str], count: int, seed: int) -> list[EndgamePosition]:
    """`count` teacher positions with one candidate left: each game's first position with one."""
    solver = setup.solver().for_histories() if setup.secret_kind == "allowed" else setup.solver()
    return teacher_positions(setup, solver, words, count, seed, max_candidates=1)


def head_positions(settings: HeadSettings) -> dict[str, list[EndgamePosition]]:
    """The training positions (games on every training word, allowed-only ones too) and the
    held-out validation ones (games on the answer list's validation words)."""
    answers = load_setup("answers")
    return {"train": one_candidate_positions(load_setup("allowed"), sorted(trainable(answers.lists.allowed)),
                                             settings.positions, settings.seed),
            "validation": one_candidate_positions(answers, sorted(held_out_validation(answers.lists.answers)),
                                                  settings.validation_positions, settings.seed + 1)}


def naming_states(model: nn.Module, tokenizer, positions: list[EndgamePosition], batch: int | None = None,
                  spread: bool = True, vector: bool = True) -> np.ndarray:
    """The final (normed) hidden state at the naming token of each position, (positions, hidden).

    What every context opens with (the system message, the user turn's start and the opener,
    about a third of a context) is run through the model once and its KV cache shared by every
    pass. On a CPU (unless not `spread`) each core runs one context at a time on a stream of its
    own (llm/cpu_streams.py): 0.53 s a position on 2 cores against 0.87 for batches of 8 on one
    stream (0.41 with the vector exp below), and batches of 2-4 a stream or more streams than cores
    were slower (results/passes/).
    Elsewhere the rest is batched by length (`batch`, default `STATES_BATCH`), so that little of a
    batch is padding (padding sits after each context's last token, which the causal mask keeps
    from seeing it). On a CPU (unless not `vector`) the attention and SwiGLU compute their `exp`
    many lanes at once (llm/vector_exp.py): a third of a pass there was mlx's one-lane `exp`."""
    contexts = [naming_context(tokenizer, p) for p in positions]
    states = np.zeros((len(contexts), model.args.hidden_size), dtype=np.float32)
    if not contexts:
        return states
    shared = shared_prefix_length(contexts)
    with vector_exp(model, vector):
        prefix = prefix_cache(model, contexts[0][:shared])
        _states_after(model, prefix, [context[shared:] for context in contexts], states, batch, spread)
    return states


def _states_after(model: nn.Module, prefix: list, rests: list[list[int]], states: np.ndarray, batch: int | None,
                  spread: bool) -> None:
    """Fill `states` with the last state of each context, `prefix` then its rest (`naming_states`)."""
    order = sorted(range(len(rests)), key=lambda i: len(rests[i]))
    with core_streams(spread) as streams:
        size = batch or (1 if len(streams) > 1 else STATES_BATCH)
        batches = [order[start:start + size] for start in range(0, len(order), size)]
        for first in range(0, len(batches), len(streams)):
            wave = batches[first:first + len(streams)]
            passes = []
            for stream, chosen in zip(streams, wave):
                with mx.stream(stream):
                    passes.append(_last_states(model, prefix, [rests[i] for i in chosen]))
            mx.eval(passes)
            for chosen, hidden in zip(wave, passes):
                states[chosen] = np.array(hidden)


def _last_states(model: nn.Module, prefix: list, rests: list[list[int]]) -> mx.array:
    """The final hidden state at each context's last token, each context `prefix` then its rest."""
    width = max(len(rest) for rest in rests)
    cache = [copy_cache(layer, len(rests)) for layer in prefix]
    hidden = model.model(mx.array([rest + [0] * (width - len(rest)) for rest in rests]), cache=cache or None)
    return hidden[mx.arange(len(rests)), mx.array([len(rest) - 1 for rest in rests])].astype(mx.float32)


def states_origin(model_spec: str, adapter: str | Path) -> dict[str, str]:
    """What a states file's states depend on: the model (as any working directory names it) and the
    sha256 of the adapter's weights, so that a retrained adapter in the same folder is another one."""
    from common.cache_files import file_digest
    from llm.adapter_files import ADAPTER_WEIGHTS
    from llm.loading import portable_spec

    return {"model": portable_spec(model_spec), "adapter_sha256": file_digest(Path(adapter) / ADAPTER_WEIGHTS)}


def _shown_origin(origin: dict) -> str:
    return f"--model {origin.get('model')} and the adapter of sha256 {str(origin.get('adapter_sha256'))[:12]}"


def load_states(path: Path, splits: dict[str, list[EndgamePosition]],
                origin: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """The states a file holds for each split's first positions; refused when the file's positions
    are not the wanted ones (positions are drawn in a seeded order that does not depend on their
    count, so a file written for more positions serves fewer, and one for fewer is extended), when
    it is not whole, or when it records another `origin` (`states_origin`) than the one given. A
    file written before the origin was recorded is taken, with a note saying so."""
    if not path.exists():
        return {name: np.zeros((0, 0), np.float32) for name in splits}
    fix = "delete it to start again"
    # A file that does not read as states at all may be anyone's: deleting it is advised only for ours.
    foreign = f"give another --states file (or, if naming-head wrote this one, {fix})"
    saved = read_arrays(path, "a naming states file", foreign)
    missing = [key for name in splits for key in (f"{name}_states", f"{name}_keys") if key not in saved]
    if missing:
        raise UserError(f"{path} is not a naming states file (no {missing[0]}); {foreign}")
    _check_origin(path, saved.get(ORIGIN_KEY), origin)
    states = {}
    for name, positions in splits.items():
        array, keys = saved[f"{name}_states"], [str(key) for key in saved[f"{name}_keys"]]
        if array.ndim != 2 or len(array) != len(keys) or not np.issubdtype(array.dtype, np.floating):
            raise UserError(f"{path} is not a naming states file (its {name} states do not fit its keys); {fix}")
        if not np.isfinite(array).all():
            raise UserError(f"{path} holds NaN or infinite {name} states: the file is damaged; {fix}")
        shared = min(len(keys), len(positions))
        if keys[:shared] != [p.key for p in positions[:shared]]:
            raise UserError(f"{path} holds other {name} positions (another --seed?): use the settings it was "
                            "written with, or another --states file")
        states[name] = array[:len(positions)]
    return states


def _check_origin(path: Path, recorded: np.ndarray | None, origin: dict[str, str] | None) -> None:
    """Refuse states made by another model or adapter than `origin`; a note for a file without a record."""
    if origin is None:
        return
    if recorded is None:
        note(f"{path} does not record the adapter its states were made with (written before files did): they are "
             f"taken as those of {_shown_origin(origin)}")
        return
    try:
        made_with = json.loads(str(recorded))
    except ValueError:
        made_with = None
    if made_with != origin:
        shown = _shown_origin(made_with) if isinstance(made_with, dict) else "an unreadable record"
        raise UserError(f"{path} holds the states of another model or adapter (made with {shown}, not "
                        f"{_shown_origin(origin)}): give another --states file, or delete it to compute them again")


def save_states(path: Path, states: dict[str, np.ndarray], splits: dict[str, list[EndgamePosition]],
                origin: dict[str, str] | None = None) -> None:
    """The states, their positions' keys and, given, the `origin` they were made with, written whole."""
    arrays = {}
    for name, array in states.items():
        arrays[f"{name}_states"] = array
        arrays[f"{name}_keys"] = np.array([p.key for p in splits[name][:len(array)]])
    if origin is not None:
        arrays[ORIGIN_KEY] = np.array(json.dumps(origin, sort_keys=True))

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    atomic_write(path, write)


def gather_states(model: nn.Module, tokenizer, splits: dict[str, list[EndgamePosition]], path: Path,
                  states: dict[str, np.ndarray], show_progress: bool,
                  origin: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Every split's states: those already read from `path` (`load_states`), then the rest computed
    `STATES_CHUNK` positions at a time, the file saved (with `origin`) after each chunk."""
    hidden = model.args.hidden_size
    for name, array in states.items():
        if len(array) and array.shape[1] != hidden:
            raise UserError(f"{path} holds states of size {array.shape[1]}, this model's are {hidden}: it was made "
                            "with another model; give another --states file, or delete it to compute them again")
    missing = sum(len(positions) - len(states[name]) for name, positions in splits.items())
    with progress_bar("positions", disable=not show_progress or not missing) as progress:
        task = progress.add_task("naming states", total=missing)
        for name, positions in splits.items():
            while len(states[name]) < len(positions):
                done = len(states[name])
                chunk = naming_states(model, tokenizer, positions[done:done + STATES_CHUNK])
                states[name] = np.concatenate([states[name].reshape(done, chunk.shape[1]), chunk])
                save_states(path, states, splits, origin)
                progress.advance(task, len(chunk))
    return states


def fit_targets(positions: list[EndgamePosition], words: tuple[str, ...]) -> np.ndarray:
    """(positions, words): each word's `fit` at each position, 0 for the words already played there."""
    index = {w: i for i, w in enumerate(words)}
    rows = np.array([positions[0].state.lists.index(w) for w in words], dtype=np.int64) if positions else None
    fits = np.zeros((len(positions), len(words)), dtype=np.float32)
    for row, position in enumerate(positions):
        fits[row] = fit_shares(position.state, rows)
        fits[row, [index[t.guess] for t in position.state.turns if t.guess in index]] = 0.0
    return fits


def secret_probabilities(logits: mx.array, secrets: mx.array) -> np.ndarray:
    """Each position's secret's probability among all the words."""
    log_p = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return np.exp(np.array(log_p[mx.arange(len(secrets)), secrets]))


def fit_head(model: nn.Module, vocabulary: WordTokens, states: dict[str, np.ndarray], fits: np.ndarray,
             secrets: dict[str, np.ndarray], settings: HeadSettings) -> tuple[NamingHead, dict]:
    """The head toward q ∝ p·exp(fit/β) on the training states, full batch with AdamW, and the epoch
    whose validation secrets' mean probability is highest; with its curve and figures."""
    embeddings, spelling, offsets = word_basis(model, vocabulary)
    hidden = embeddings.shape[1]
    mx.random.seed(settings.seed)
    params = {"down": mx.random.normal((settings.rank, hidden)) * (1 / hidden ** 0.5),
              "up": mx.zeros((hidden, settings.rank)), "letters": mx.zeros((spelling.shape[1], hidden))}
    h = {name: mx.array(array) for name, array in states.items()}
    target = mx.softmax(h["train"] @ embeddings.T + offsets + mx.array(fits) / settings.beta, axis=-1)

    def logits_of(name: str, p: dict) -> mx.array:
        return readout_logits(h[name], embeddings, p["down"], p["up"], p["letters"], spelling, offsets)

    def loss_fn(p: dict) -> mx.array:
        return -(target * nn.log_softmax(logits_of("train", p), axis=-1)).sum(axis=-1).mean()

    def mean_p(name: str, p: dict) -> float:
        return float(secret_probabilities(logits_of(name, p), mx.array(secrets[name])).mean())

    before = {name: mean_p(name, params) for name in states}
    optimizer = optim.AdamW(learning_rate=settings.lr, weight_decay=settings.weight_decay)
    loss_and_grad = mx.value_and_grad(loss_fn)
    curve, best = [], (-1.0, 0, params)
    for epoch in range(1, settings.epochs + 1):
        loss, grads = loss_and_grad(params)
        optimizer.update(params, grads)
        mx.eval(params, optimizer.state)
        if epoch % EVAL_EVERY == 0 or epoch == settings.epochs:
            point = {"epoch": epoch, "loss": round(float(loss), 5), "train_mean_p": round(mean_p("train", params), 5),
                     "validation_mean_p": round(mean_p("validation", params), 5)}
            curve.append(point)
            if point["validation_mean_p"] > best[0]:
                best = (point["validation_mean_p"], epoch, dict(params))
    chosen = best[2]
    head = NamingHead(*(np.array(chosen[k]) for k in ("down", "up", "letters")), settings.beta)
    figures = {"best_epoch": best[1], "curve": curve,
               "mean_p_before": {name: round(value, 5) for name, value in before.items()},
               "mean_p_after": {name: round(mean_p(name, chosen), 5) for name in states}}
    return head, figures


def refuse_diverged(head: NamingHead, figures: dict, settings: HeadSettings, path: Path) -> None:
    """A fit whose loss, figures or head went NaN or infinite is an error, before anything is saved:
    written, it would replace a good head at `path` with one that names nothing (an AdamW step of
    learning rate times weight decay 10 blows the head up; a --beta below 1e-38 did at once)."""
    points = [*figures["curve"], {"epoch": settings.epochs, **figures["mean_p_after"]}]
    broken = [point["epoch"] for point in points if not all(np.isfinite(value) for value in point.values())]
    if not broken and all(np.isfinite(getattr(head, key)).all() for key in ("down", "up", "letters")):
        return
    kept = f"{path} keeps the head it had" if path.exists() else "no head was written"
    raise UserError(f"the naming head's fit diverged (NaN figures by epoch {min(broken, default=settings.epochs)} "
                    f"with --lr {settings.lr:g}, --weight-decay {settings.weight_decay:g}, --beta {settings.beta:g}): "
                    f"{kept}; fit again with a lower --lr or --weight-decay")


def fit_inputs(tokenizer, splits: dict[str, list[EndgamePosition]]
               ) -> tuple[WordTokens, dict[str, np.ndarray], np.ndarray]:
    """What `fit_head` needs besides the states: every allowed word's tokens, each split's secrets
    as word indices, and the training positions' fit targets."""
    vocabulary = WordTokens.of(tokenizer, load_setup("answers").lists.allowed)
    index = {w: i for i, w in enumerate(vocabulary.words)}
    secrets = {name: np.array([index[p.secret] for p in positions]) for name, positions in splits.items()}
    return vocabulary, secrets, fit_targets(splits["train"], vocabulary.words)


def run_naming_head(model_spec: str, adapter: str, settings: HeadSettings, states_path: str | None,
                    dtype: str = "auto", show_progress: bool = True) -> dict:
    """`naming-head`: the head fitted on the adapter's states, saved beside it with its record, holding
    the adapter folder's run lock (common/run_lock.py) throughout: without it, two fits on one adapter
    at once both ended well and the folder kept the head of whichever ended last."""
    from common.run_lock import run_lock

    with run_lock(adapter, "--adapter"):
        return _fit_and_save(model_spec, adapter, settings, states_path, dtype, show_progress)


def _fit_and_save(model_spec: str, adapter: str, settings: HeadSettings, states_path: str | None, dtype: str,
                  show_progress: bool) -> dict:
    from llm.loading import load_model

    folder = Path(adapter)
    states_file = Path(states_path) if states_path else folder / STATES_FILE
    started = time.perf_counter()
    splits = head_positions(settings)
    origin = states_origin(model_spec, adapter)
    held = load_states(states_file, splits, origin)  # read first: a wrong states file is refused before the model loads
    if any(len(held[name]) < len(positions) for name, positions in splits.items()):
        check_writable_file(states_file)  # the states are saved as they grow: refused now, not after the passes
    model, tokenizer = load_model(model_spec, adapter, dtype, fuse=True)
    model.eval()
    vocabulary, secrets, fits = fit_inputs(tokenizer, splits)
    word_basis(model, vocabulary)  # a model the head cannot serve is refused now, not after the passes
    states = gather_states(model, tokenizer, splits, states_file, held, show_progress, origin)
    gathered = time.perf_counter()
    head, figures = fit_head(model, vocabulary, states, fits, secrets, settings)
    refuse_diverged(head, figures, settings, folder / HEAD_FILE)
    head.save(folder / HEAD_FILE)
    record = {"model": model_spec, "adapter": str(adapter), "settings": asdict(settings),
              "positions": {name: len(p) for name, p in splits.items()}, "words": len(vocabulary.words),
              "states": str(states_file), **figures, "states_seconds": round(gathered - started, 1),
              "fit_seconds": round(time.perf_counter() - gathered, 1)}
    atomic_write_json(folder / RECORD_FILE, record)
    return record


def summary_line(record: dict) -> str:
    """One line of what the fit did, for the terminal: the secret's probability on held-out
    validation positions beside the training ones, so that skill is told from memory."""
    before, after = record["mean_p_before"], record["mean_p_after"]
    return (f"naming head (beta {record['settings']['beta']}, epoch {record['best_epoch']}): secret's probability "
            f"among {record['words']:,} words, held-out validation {before['validation']:.3f} -> "
            f"{after['validation']:.3f} (training positions {before['train']:.3f} -> {after['train']:.3f}); "
            f"{json.dumps(record['positions'])} positions")
