"""RL of the naming head: GRPO alternating with filtered expert iteration, the model frozen.

The start adapter's head (llm/naming_head.py) is the policy's word choice where the model writes
` Only`. The model plays `head.games` whole games on training secrets with it; every answer where
the head named a word is recorded with the hidden state it named from (rl/head_games.py). Those
states, mixed with the head fit's own training states (the teacher's thoughts, `teacher_share`),
are the positions RL trains at: a GRPO step draws `group_size` words from the head at each of
`states_per_step` states, scores each by the reward kernel as the guess there, drops the groups
whose words all score alike, and takes the clipped-ratio step with the exact KL to the start head;
an expert-iteration step trains toward the drawn words that won (rl/head_policy.py). No step
needs the model: only the games do.

The head is chosen on held-out validation words only: the fit's validation states, by the
probability of naming the secret at the play temperature, every `eval_every` steps; the best
is RUN/best (the start adapter with that head), the last RUN/adapter. A checkpoint keeps the
head, the optimizer, both generators and the best so far, so a killed run resumes exactly.
"""

from __future__ import annotations

import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from common.errors import UserError
from common.progress import progress_bar
from common.fileio import atomic_replace_dir, atomic_write_json, read_json
from eval.endgame import EndgamePosition
from eval.harness import summarise
from eval.splits import SPLITS
from llm.adapter_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from llm.naming_head import HEAD_FILE, NamingHead
from llm.word_steering import WordTokens, secret_mask, word_basis
from rl.head_games import NamingRecords, play_recording
from rl.head_policy import (HEAD_PARAMS, HeadBasis, as_head, clip_gradients, expert_loss, group_advantages, grpo_loss,
                            head_parameters, masked_rows, sample_words, word_log_probs)
from rl.naming_head import RECORD_FILE, STATES_FILE, HeadSettings, head_positions, load_states
from rl.reward import RewardScorer
from rl.run_files import START_ADAPTER, RunRequest, start_run_folder
from sft.checkpoint import load_checkpoint, save_checkpoint
from sft.run import MetricsLog
from solver.setup import load_setup

RECORDS_FILE = "head_records.npz"  # the model's own naming states, kept so a resume does not replay the games
GAMES_FILE = "head_games.json"  # those games: the start head's wins on training secrets
BEST_DIR, ADAPTER_DIR = "best", "adapter"


class HeadModule(nn.Module):
    """The head's parameters as a module, for mlx's gradients, optimizers and checkpoints; only
    those `trained` names are trainable (`HEAD_PARAMS`)."""

    def __init__(self, head: NamingHead, trained: tuple[str, ...] = HEAD_PARAMS["arrays"]) -> None:
        super().__init__()
        for name, value in head_parameters(head).items():
            setattr(self, name, value)
        self.freeze(keys=[name for name in self.params() if name not in trained])

    def params(self) -> dict[str, mx.array]:
        return {name: getattr(self, name) for name in (*HEAD_PARAMS["arrays"], *HEAD_PARAMS["gains"])}


class StateBank:
    """Training positions with their states and banned words, each scored on its own setup's lists."""

    def __init__(self, positions: list[EndgamePosition], states: np.ndarray, banned: list[np.ndarray],
                 scorer: RewardScorer) -> None:
        self.positions, self.states, self.banned, self.scorer = positions, states, banned, scorer
        allowed = scorer.setup.lists
        self.secret_rows = np.array([allowed.index(p.secret) for p in positions], dtype=np.int64)
        self.possible = secret_mask(allowed.allowed, scorer.setup.start.secret_words)  # (words,) its game's secrets

    def __len__(self) -> int:
        return len(self.positions)

    def rewards(self, chosen: np.ndarray, words: np.ndarray) -> np.ndarray:
        """(len(chosen), G): the reward of each drawn word (an allowed-list row) at its position."""
        return np.stack([self.scorer.score_rows(words[i], self.positions[j].state, self.positions[j].secret)
                         for i, j in enumerate(chosen)])


def teacher_bank(adapter: Path, allowed: tuple[str, ...], scorer: RewardScorer
                 ) -> tuple[StateBank, np.ndarray, np.ndarray]:
    """The head fit's training states as a bank (allowed-list secrets), and its validation states
    with their secrets' word indices: read from the states file beside the adapter."""
    record = read_json(adapter / RECORD_FILE, "naming head record")
    settings = HeadSettings(**{k: v for k, v in record["settings"].items() if k in HeadSettings.__dataclass_fields__})
    splits = head_positions(settings)
    states = load_states(Path(record.get("states") or adapter / STATES_FILE), splits)
    if any(len(states[name]) < len(splits[name]) for name in splits):
        raise UserError(f"the naming states beside {adapter} are incomplete: run naming-head on it again")
    index = {w: i for i, w in enumerate(allowed)}

    def banned(position: EndgamePosition) -> np.ndarray:
        return np.array(sorted({index[w] for w in (*position.state.guesses,
                                                   *(r.guess for r in position.rejected)) if w in index}),
                        dtype=np.int64)

    train = StateBank(splits["train"], states["train"], [banned(p) for p in splits["train"]], scorer)
    validation_secrets = np.array([index[p.secret] for p in splits["validation"]])
    validation_banned = masked_rows([banned(p) for p in splits["validation"]], len(allowed))
    return train, (states["validation"], validation_banned), validation_secrets


def run_head_rl(request: RunRequest, show_progress: bool = True) -> dict:
    """`rl` when the start adapter has a naming head and `head.train` allows it (rl/loop.py chooses):
    the summary."""
    from llm.loading import load_model

    config, out = request.config, request.out
    settings = config.head
    adapter = Path(request.adapter)
    setups = {"answers": load_setup("answers"), "allowed": load_setup("allowed")}
    scorers = {kind: RewardScorer(setup, config.reward) for kind, setup in setups.items()}
    model, tokenizer = load_model(request.model, adapter, config.dtype, fuse=True)
    model.eval()
    start_head = NamingHead.load(adapter / HEAD_FILE)
    allowed = setups["answers"].lists.allowed
    embeddings, spelling, offsets = word_basis(model, WordTokens.of(tokenizer, list(allowed)))
    basis = HeadBasis(embeddings, spelling, offsets)
    temperature = config.rollout.temperature
    teacher, (val_states, val_banned), val_secrets = teacher_bank(adapter, allowed, scorers["allowed"])
    val_states = mx.array(val_states)
    val_possible = mx.array(secret_mask(allowed, setups["answers"].start.secret_words))
    out.mkdir(parents=True, exist_ok=True)
    if not request.resume:
        _start_folder(out, request, adapter)
    own = _own_records(out, model, tokenizer, start_head, setups["answers"], config, show_progress)
    own_bank = StateBank(own.positions, own.states, own.banned, scorers["answers"])

    module = HeadModule(start_head, HEAD_PARAMS[settings.params])
    reference = head_parameters(start_head)
    optimizer = optim.AdamW(learning_rate=settings.learning_rate, weight_decay=settings.weight_decay)
    optimizer.init(module.trainable_parameters())
    rng = np.random.default_rng(config.seed)
    mx.random.seed(config.seed)
    metrics = MetricsLog(out / "metrics.jsonl")
    best = {"step": 0, "figure": -1.0}
    start = 0
    if request.resume:
        checkpoint = load_checkpoint(out, module, optimizer)
        start, best = checkpoint.step, checkpoint.extra["best"]
        rng.bit_generator.state = checkpoint.extra["rng"]
        metrics.keep_until(start)

    own_states, own_banned = mx.array(own_bank.states), masked_rows(own_bank.banned, len(allowed))

    def p_secret(states: mx.array, banned: mx.array, secrets: np.ndarray, possible: mx.array) -> float:
        if not len(secrets):
            return None
        log_p = word_log_probs(module.params(), basis, states, banned, temperature, possible)
        return round(float(mx.exp(log_p[mx.arange(len(secrets)), mx.array(secrets)]).mean()), 5)

    def validation() -> dict:
        """The secret's probability at the play temperature on held-out validation states (what
        chooses RUN/best) and at the model's own training states (memory, told from skill)."""
        return {"validation_p_secret": p_secret(val_states, val_banned, val_secrets, val_possible),
                "own_train_p_secret": p_secret(own_states, own_banned, own_bank.secret_rows,
                                               mx.array(own_bank.possible))}

    def export(folder: Path) -> None:
        head = as_head(module.params(), start_head.beta)

        def build(tmp: Path) -> None:
            for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
                (tmp / name).write_bytes((out / START_ADAPTER / name).read_bytes())
            head.save(tmp / HEAD_FILE)

        atomic_replace_dir(folder, build)

    if start == 0:
        figures = validation()
        metrics.append({"step": 0, "phase": "heldout", **figures})
        best = {"step": 0, "figure": figures["validation_p_secret"]}
        export(out / BEST_DIR)
    losses = {"grpo": nn.value_and_grad(module, lambda m, *args: grpo_loss(m.params(), *args)),
              "ei": nn.value_and_grad(module, lambda m, *args: expert_loss(m.params(), *args))}
    schedule = config.phases
    with progress_bar("steps", disable=not show_progress) as progress:
        task = progress.add_task("head RL", total=config.steps, completed=start)
        for step in range(start, config.steps):
            began = time.perf_counter()
            phase = schedule.phase(step)
            record = _step(phase, module, optimizer, losses[phase], basis, reference, own_bank, teacher,
                           settings, temperature, rng)
            record = {"step": step + 1, "phase": phase, **record, "seconds": round(time.perf_counter() - began, 3)}
            last = step + 1 == config.steps
            if config.eval_every and ((step + 1) % config.eval_every == 0 or last):
                record.update(validation())
                if record["validation_p_secret"] > best["figure"]:
                    best = {"step": step + 1, "figure": record["validation_p_secret"]}
                    export(out / BEST_DIR)
            metrics.append(record)
            if (step + 1) % config.checkpoint_every == 0 or last:
                save_checkpoint(out, module, optimizer, step + 1, {"fine_tune_type": "naming_head"},
                                {"rng": rng.bit_generator.state, "best": best}, keep=config.keep_checkpoints)
            progress.advance(task)
    export(out / ADAPTER_DIR)
    records = metrics.records()
    steps = [r for r in records if r["phase"] != "heldout"]
    summary = {"run": str(out), "adapter": str(out / ADAPTER_DIR), "best_adapter": str(out / BEST_DIR),
               "best_step": best["step"], "best_validation_p_secret": best["figure"],
               "start_validation_p_secret": records[0].get("validation_p_secret") if records else None,
               "steps": len(steps), "own_states": len(own), "teacher_states": len(teacher),
               "dropped_fraction_mean": _mean([r["dropped_fraction"] for r in steps if "dropped_fraction" in r]),
               "training_games": read_json(out / GAMES_FILE, "head games")["summary"]}
    atomic_write_json(out / "summary.json", summary)
    return summary


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 5) if values else None


def _start_folder(out: Path, request: RunRequest, adapter: Path) -> None:
    """What a resume needs, as LoRA RL writes it (rl/run_files.py), with the head beside the start adapter."""
    from llm.loading import portable_spec

    start_run_folder(out, portable_spec(request.model), str(adapter), request.config)
    for name in (HEAD_FILE, RECORD_FILE):
        (out / START_ADAPTER / name).write_bytes((adapter / name).read_bytes())


def _own_records(out: Path, model, tokenizer, head: NamingHead, setup, config, show_progress: bool) -> NamingRecords:
    """The model's naming states in `head.games` games on training secrets, played once and kept."""
    from eval.splits import sample_secrets
    from llm.generation import SamplingSettings

    path = out / RECORDS_FILE
    if path.is_file() and (out / GAMES_FILE).is_file():
        return NamingRecords.load(path, setup)
    secrets = sample_secrets(SPLITS[config.secret_split](setup.lists.answers), config.head.games, config.seed)
    sampling = SamplingSettings(config.rollout.temperature, config.rollout.top_p, config.rollout.max_tokens)
    started = time.perf_counter()
    records, games = play_recording(model, tokenizer, head, setup, secrets, sampling, config.seed,
                                    config.rollout.batch_size, show_progress)
    summary = summarise(games, time.perf_counter() - started)
    records.save(path)
    atomic_write_json(out / GAMES_FILE, {"summary": {k: v for k, v in summary.items() if k != "per_game"},
                                         "games": [g.to_json() for g in games]})
    return records


def _draw(rng: np.random.Generator, own: StateBank, teacher: StateBank, count: int, teacher_share: float
          ) -> list[tuple[StateBank, np.ndarray]]:
    """`count` states: `teacher_share` of them (rounded) from the teacher's bank, the rest the model's own."""
    from_teacher = round(count * teacher_share) if len(own) else count
    draws = []
    for bank, n in ((own, count - from_teacher), (teacher, from_teacher)):
        if n and len(bank):
            draws.append((bank, rng.integers(len(bank), size=n)))
    return draws


def _step(phase: str, module: HeadModule, optimizer, loss_and_grad, basis: HeadBasis, reference: dict,
          own: StateBank, teacher: StateBank, settings, temperature: float, rng: np.random.Generator) -> dict:
    """One GRPO or expert-iteration step on freshly drawn words at freshly drawn states."""
    draws = _draw(rng, own, teacher, settings.states_per_step, settings.teacher_share)
    states = mx.array(np.concatenate([bank.states[chosen] for bank, chosen in draws]))
    words_count = basis.embeddings.shape[0]
    banned = masked_rows([bank.banned[j] for bank, chosen in draws for j in chosen], words_count)
    possible = mx.array(np.concatenate([np.broadcast_to(bank.possible, (len(chosen), words_count))
                                        for bank, chosen in draws]))
    log_p = word_log_probs(module.params(), basis, states, banned, temperature, possible)
    key = mx.random.key(int(rng.integers(2 ** 31)))
    words = sample_words(log_p, settings.group_size, key)
    words_np = np.array(words)
    rewards = np.concatenate([bank.rewards(chosen, words_np[offset:offset + len(chosen)])
                              for (bank, chosen), offset in zip(draws, np.cumsum([0] + [len(c) for _, c in draws]))])
    ref_log_p = mx.stop_gradient(word_log_probs(reference, basis, states, banned, temperature, possible))
    secrets = np.concatenate([bank.secret_rows[chosen] for bank, chosen in draws])
    won = words_np == secrets[:, None]
    figures = {"reward_mean": round(float(rewards.mean()), 5), "win_rate": round(float(won.mean()), 5)}
    if phase == "grpo":
        advantages, kept = group_advantages(rewards)
        figures["dropped_fraction"] = round(float(1 - kept.mean()), 4)
        if not kept.any():
            return {**figures, "loss": None, "kl": None, "grad_norm": None}
        rows = mx.array(np.flatnonzero(kept))
        old = mx.stop_gradient(mx.take_along_axis(log_p, words, axis=-1))[rows]
        args = (basis, states[rows], banned[rows], words[rows], old, mx.array(advantages[kept], dtype=mx.float32),
                ref_log_p[rows], settings, temperature, possible[rows])
        for _ in range(settings.updates):
            (loss, kl), grads = loss_and_grad(module, *args)
            grads, norm = clip_gradients(grads, settings.max_grad_norm)
            optimizer.update(module, grads)
            mx.eval(module.parameters(), optimizer.state)
    else:
        keep = won.any(axis=1)
        figures["kept_fraction"] = round(float(keep.mean()), 4)
        if not keep.any():
            return {**figures, "loss": None, "kl": None, "grad_norm": None}
        rows = np.flatnonzero(keep)
        kept_rows = mx.array(rows)
        args = (basis, states[kept_rows], banned[kept_rows], words[kept_rows], mx.array(won[rows], dtype=mx.float32),
                ref_log_p[kept_rows], settings, temperature, possible[kept_rows])
        (loss, kl), grads = loss_and_grad(module, *args)
        grads, norm = clip_gradients(grads, settings.max_grad_norm)
        optimizer.update(module, grads)
        mx.eval(module.parameters(), optimizer.state)
    return {**figures, "loss": round(float(loss), 5), "kl": round(float(kl), 6), "grad_norm": round(norm, 5)}

