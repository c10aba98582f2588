"""`export --fold-head`: the naming head beside the adapter folded into the exported model as word tokens.

llm/head_words.py says what the fold is. Its rows need the model's final states where the head acts
and where it must not: the teacher's whole answers at positions of games on training answers, some
with one candidate left (their naming token is where the head acts) and some earlier (every other
token of a thought, the tag and the end), each answer read by the exported model itself in one pass.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np

from common.errors import UserError
from common.progress import progress_bar
from eval.endgame import EndgamePosition, teacher_positions
from eval.splits import trainable
from llm.format import NAMING_WORD, prompt_tokens
from llm.head_words import fold_figures, word_rows, write_word_tokens
from llm.naming_head import NamingHead
from llm.word_steering import WordTokens
from sft.cot import expert_move
from solver.setup import load_setup

NAMING_POSITIONS = 240  # one candidate left: the states the head's rows are fitted to play at
OTHER_POSITIONS = 160  # up to 200 candidates left: where the gate learns to shut the words
OTHER_CANDIDATES = 200
HELD_OUT_EVERY = 5  # every fifth position only measures the fold (its figures), the rest fit it


def fold_positions(naming: int, other: int, seed: int) -> list[tuple[EndgamePosition, str]]:
    """Positions of the solver's games on training answers (never a held-out one) with the teacher's answer."""
    setup = load_setup("answers")
    solver, words = setup.solver(), sorted(trainable(setup.lists.answers))
    positions = (teacher_positions(setup, solver, words, naming, seed, max_candidates=1)
                 + teacher_positions(setup, solver, words, other, seed + 1, max_candidates=OTHER_CANDIDATES))
    return [(position, expert_move(solver, position.state)[1]) for position in positions]


def answer_states(model, tokenizer, answered: list[tuple[EndgamePosition, str]],
                  show_progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each answer read in one pass of the model: the final states that predict its tokens, (the one
    that predicts the word after the naming word, all the others)."""
    naming = f" {NAMING_WORD} "
    found: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
    with progress_bar("fold", disable=not show_progress) as bar:
        task = bar.add_task("fold: answer states", total=len(answered))
        for position, answer in answered:
            prompt = prompt_tokens(tokenizer, position.state, position.rejected)
            ids = prompt + tokenizer.encode(answer, add_special_tokens=False)
            rows = slice(len(prompt) - 1, len(ids) - 1)
            states = np.array(model.model(mx.array([ids]))[0, rows].astype(mx.float32))
            named = np.zeros(len(ids), bool)
            if naming in answer:  # the state at the naming word's last token predicts the word
                cut = answer.index(naming) + len(naming) - 1
                named[len(prompt) + len(tokenizer.encode(answer[:cut], add_special_tokens=False)) - 1] = True
            found[0].append(states[named[rows]])
            found[1].append(states[~named[rows]])
            bar.advance(task)
    return np.concatenate(found[0]), np.concatenate(found[1])


def fold_head(folder: Path, head_file: Path, seed: int = 0, naming: int = NAMING_POSITIONS,
              other: int = OTHER_POSITIONS, show_progress: bool = False) -> dict:
    """Fold the head at `head_file` into the model folder `folder` (written in place: export calls this on
    its folder before it appears); the fold's figures (llm/head_words.py `fold_figures`)."""
    from llm.loading import load_model

    model, tokenizer = load_model(str(folder))
    head = NamingHead.load(head_file)
    if head.hidden != model.args.hidden_size:
        raise UserError(f"the naming head {head_file} was fitted on a model with hidden size {head.hidden}, "
                        f"not {model.args.hidden_size}")
    setup = load_setup("answers")
    vocabulary = WordTokens.of(tokenizer, list(setup.lists.allowed))
    answered = fold_positions(naming, other, seed)
    fit = answer_states(model, tokenizer, [a for i, a in enumerate(answered) if i % HELD_OUT_EVERY], show_progress)
    held = answer_states(model, tokenizer, answered[::HELD_OUT_EVERY], show_progress)
    if not len(fit[0]) or not len(held[0]):
        raise UserError("the teacher's answers never reached the naming token: no states to fold the head at")
    secrets = setup.start.secret_words
    rows = word_rows(model, head, vocabulary, *fit, secrets)
    figures = fold_figures(model, head, vocabulary, rows, *held, secrets)
    write_word_tokens(folder, rows, model)
    return {"head": str(head_file.resolve()), "words": len(rows.words), "seed": seed,
            "positions": {"fit": len(answered) - len(answered[::HELD_OUT_EVERY]),
                          "held_out": len(answered[::HELD_OUT_EVERY])}, "held_out": figures}
