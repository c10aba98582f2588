"""`export --fold-head`: the naming head beside the adapter folded into the exported model as word tokens.

llm/head_words.py says what the fold is. Its rows need the model's final states where the head acts
and where it must not: the teacher's whole answers at positions of games on training answers, some
with one candidate left (their naming token is where the head acts) and some earlier (every other
token of a thought, the tag and the end), each answer read by the exported model itself in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from common.errors import UserError
from common.progress import progress_bar
from eval.endgame import EndgamePosition, teacher_positions
from eval.splits import trainable
from llm.format import NAMING_WORD, prompt_tokens
from llm.head_words import fold_figures, word_inputs, word_rows, write_word_tokens
from llm.naming_head import NamingHead
from llm.word_steering import WordTokens
from sft.cot import expert_move
from solver.setup import load_setup

GUESS_TAG = "<guess>"
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


@dataclass(frozen=True)
class AnswerStates:
    """The final states that predict the teacher's answer tokens, by where they are."""

    naming: np.ndarray  # at the naming token: the head's own states
    tag: np.ndarray  # at the guess tag after a thought that named the one left: the word is written again
    other: np.ndarray  # every other token of the answers


def answer_states(model, tokenizer, answered: list[tuple[EndgamePosition, str]], vocabulary: WordTokens,
                  inputs: np.ndarray, show_progress: bool = False) -> AnswerStates:
    """Each answer read in one pass of the model as the folded model writes it (the word after the
    naming word as its word token, with its `inputs` row), its states sorted by `AnswerStates`' places."""
    index = {word: i for i, word in enumerate(vocabulary.words)}
    naming = f" {NAMING_WORD} "
    found: dict[str, list[np.ndarray]] = {"naming": [], "tag": [], "other": []}
    with progress_bar("fold", disable=not show_progress) as bar:
        task = bar.add_task("fold: answer states", total=len(answered))
        for position, answer in answered:
            prompt = prompt_tokens(tokenizer, position.state, position.rejected)
            ids = prompt + tokenizer.encode(answer, add_special_tokens=False)
            embedded = model.model.embed_tokens(mx.array(ids))
            places = np.full(len(ids), 2)
            if naming in answer:  # the answer names the one left: the word as its word token, as the fold writes it
                cuts = (answer.index(naming) + len(naming) - 1, answer.index(GUESS_TAG) + len(GUESS_TAG))
                start, tag = (len(prompt) + len(tokenizer.encode(answer[:cut], add_special_tokens=False))
                              for cut in cuts)
                word = index[answer[answer.index(naming) + len(naming):][:5]]
                pieces = vocabulary.sequences[word]
                if tuple(ids[start:start + len(pieces)]) == pieces:
                    places[[start - 1, tag - 1]] = [0, 1]  # the states at these inputs predict the word
                    keep = np.r_[0:start, start + len(pieces) - 1:len(ids)]
                    embedded = mx.concatenate([embedded[:start], mx.array(inputs[word])[None],
                                               embedded[start + len(pieces):]])
                    ids, places = [ids[k] for k in keep], places[keep]
            hidden = model.model(mx.array([ids]), input_embeddings=embedded[None])[0]
            rows = slice(len(prompt) - 1, len(ids) - 1)
            states = np.array(hidden[rows].astype(mx.float32))
            for number, name in enumerate(found):
                found[name].append(states[places[rows] == number])
            bar.advance(task)
    return AnswerStates(*(np.concatenate(found[name]) for name in found))


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
    inputs = word_inputs(model, head, vocabulary)
    fit = answer_states(model, tokenizer, [a for i, a in enumerate(answered) if i % HELD_OUT_EVERY], vocabulary,
                        inputs, show_progress)
    held = answer_states(model, tokenizer, answered[::HELD_OUT_EVERY], vocabulary, inputs, show_progress)
    if not len(fit.naming) or not len(held.naming):
        raise UserError("the teacher's answers never reached the naming token: no states to fold the head at")
    secrets = setup.start.secret_words
    rows = word_rows(model, head, vocabulary, fit.naming, fit.tag, fit.other, secrets)
    figures = fold_figures(model, head, vocabulary, rows, held.naming, held.other, secrets)
    write_word_tokens(folder, rows, model)
    return {"head": str(head_file.resolve()), "words": len(rows.words), "seed": seed,
            "positions": {"fit": len(answered) - len(answered[::HELD_OUT_EVERY]),
                          "held_out": len(answered[::HELD_OUT_EVERY])}, "held_out": figures}
