"""How many decode steps eval's answers would take if each step verified drafted tokens (speculative
decoding), replayed on an eval JSON's recorded answers; no model runs.

A step runs each row's last token and up to k drafted tokens through the model at once; the row keeps
the drafted tokens its own draws agree with (answers draw token t with key t of their own, so a
drafted token kept is the token one-at-a-time decoding draws, to float rounding), plus the token
drawn after the last kept one. Drafts are the k tokens that followed the latest earlier occurrence of
the context's last n tokens (n = 4 down to 2, then 1 in the corpus): in the prompt, the game's
earlier answers and the answer so far ("lookup"), or in a corpus of other answers, longest match first.
Corpora: "online" is the answers of earlier rounds of the same eval (what an eval could use), "other"
is the answers of another JSON's games with other secrets. "teacher" puts into the lookup's context
the solver's answer for the position (sft/cot.py's `expert_answer`) and, once the answer so far
names a word, the true thought for that word (`truthful_answer`), as a drafter could know them.

    python -m studies.speculation_sim EVAL.json OTHER_EVAL.json OUT.json
"""

from llm.blas import ensure_fast_blas

ensure_fast_blas()

import collections  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

from llm.format import Rejection, prompt_tokens  # noqa: E402
from llm.loading import load_model  # noqa: E402
from sft.cot import expert_answer, truthful_answer  # noqa: E402
from solver.feedback import parse_pattern  # noqa: E402
from solver.setup import load_setup  # noqa: E402
from solver.state import GameState  # noqa: E402

DRAFTS = (1, 2, 3, 4, 6, 8)


def answers_of(record: dict, tokenizer, setup, solver) -> list[dict]:
    """Every answer of every game: its prompt, its tokens (the text encoded again, end token
    added), its round and the game's earlier answers' tokens."""
    out = []
    for game in record["per_game"]:
        state, rejected, earlier = GameState(setup.lists, setup.matrix), [], []
        patterns = iter(turn["pattern"] for turn in game["turns"])
        for number, move in enumerate(game["moves"]):
            tokens = tokenizer.encode(move["text"], add_special_tokens=False) + [tokenizer.eos_token_id]
            own = (tokenizer.encode(truthful_answer(state, move["guess"]), add_special_tokens=False)
                   if move["failure"] is None else [])
            out.append({"prompt": prompt_tokens(tokenizer, state, tuple(rejected)), "tokens": tokens,
                        "round": number, "earlier": list(earlier), "guess": move["guess"] or "", "own": own,
                        "expert": tokenizer.encode(expert_answer(solver, state), add_special_tokens=False)})
            earlier.extend(tokens)
            if move["failure"] is None:
                state, rejected = state.play(move["guess"], parse_pattern(next(patterns))), []
            else:
                rejected.append(Rejection(move["guess"], move["failure"]))
    return out


class Corpus:
    """The tokens most often following each 1-4 token context in a set of answers."""

    def __init__(self, answers: list[list[int]], k: int) -> None:
        counts = collections.defaultdict(collections.Counter)
        for tokens in answers:
            for n in (1, 2, 3, 4):
                for i in range(n, len(tokens)):
                    counts[tuple(tokens[i - n:i])][tuple(tokens[i:i + k])] += 1
        self.best = {key: c.most_common(1)[0][0] for key, c in counts.items()}

    def draft(self, context: list[int], least: int) -> tuple[int, list[int]]:
        for n in (4, 3, 2, 1):
            if n >= least and tuple(context[-n:]) in self.best:
                return n, list(self.best[tuple(context[-n:])])
        return 0, []


def lookup(context: list[int], n: int, k: int) -> list[int]:
    suffix = context[-n:]
    for i in range(len(context) - n - 1, -1, -1):
        if context[i:i + n] == suffix:
            return context[i + n:i + n + k]
    return []


def draft(answer: dict, done: list[int], k: int, corpus: Corpus | None, teacher: list[int] | None = None) -> list[int]:
    context = (teacher or []) + answer["prompt"] + answer["earlier"] + done
    for n in (4, 3, 2):
        if corpus is not None:
            found, tokens = corpus.draft(done, n)
            if found >= n and tokens:
                return tokens[:k]
        if len(context) > n:
            tokens = lookup(context, n, k)
            if tokens:
                return tokens
    return corpus.draft(done, 1)[1][:k] if corpus is not None else []


def steps_of(answer: dict, k: int, corpus: Corpus | None, tokenizer=None) -> int:
    tokens, t, steps = answer["tokens"], 0, 0
    while t < len(tokens):
        teacher = None
        if tokenizer is not None:
            named = answer["guess"] and answer["guess"] in tokenizer.decode(tokens[:t])
            teacher = answer["expert"] + (answer["own"] if named else [])
        drafted = draft(answer, tokens[:t], k, corpus, teacher)
        kept = 0
        while kept < len(drafted) and t + kept < len(tokens) and drafted[kept] == tokens[t + kept]:
            kept += 1
        t, steps = t + kept + 1, steps + 1
    return steps


def main(eval_path: str, other_path: str, out_path: str) -> None:
    _, tokenizer = load_model("default")
    setup = load_setup()
    solver = setup.solver()
    record, other = json.load(open(eval_path)), json.load(open(other_path))
    answers = answers_of(record, tokenizer, setup, solver)
    secrets = {g["secret"] for g in record["per_game"]}
    other_tokens = [tokenizer.encode(m["text"], add_special_tokens=False) + [tokenizer.eos_token_id]
                    for g in other["per_game"] if g["secret"] not in secrets for m in g["moves"]]
    rounds = max(a["round"] for a in answers) + 1
    tokens = sum(len(a["tokens"]) for a in answers)
    lockstep_tokens = sum(max((len(a["tokens"]) for a in answers if a["round"] == r), default=0) for r in range(rounds))
    rows = []
    for drafter in ("lookup", "lookup+online", "lookup+other", "lookup+teacher", "lookup+teacher+other"):
        for k in DRAFTS:
            steps, other_corpus = [], Corpus(other_tokens, k) if drafter.endswith("+other") else None
            for r in range(rounds):
                corpus = other_corpus
                if drafter == "lookup+online":
                    corpus = Corpus([a["tokens"] for a in answers if a["round"] < r], k)
                steps += [(r, steps_of(a, k, corpus, tokenizer if "teacher" in drafter else None))
                          for a in answers if a["round"] == r]
            total = sum(s for _, s in steps)
            lockstep = sum(max((s for rr, s in steps if rr == r), default=0) for r in range(rounds))
            rows.append({"drafter": drafter, "k": k, "row_steps": total, "tokens_per_row_step": round(tokens / total, 3),
                         "lockstep_steps": lockstep, "lockstep_tokens_per_step": round(lockstep_tokens / lockstep, 3)})
            print(rows[-1], flush=True)
    json.dump({"eval": eval_path, "other": other_path, "answers": len(answers), "answer_tokens": tokens,
               "other_answers": len(other_tokens), "rounds": rounds, "lockstep_tokens": lockstep_tokens,
               "drafts": rows}, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
