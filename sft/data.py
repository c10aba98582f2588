"""SFT data: chat examples read from JSONL, checked, and tokenized with the prompt masked.

A data folder is what `gen-sft` writes and what `mlx_lm.lora --data` reads:
`train.jsonl` (required), `valid.jsonl` and `test.jsonl` (optional), one
`{"messages": [system, user, assistant]}` object a line. Every line is checked
before any training starts, so a bad file fails in a second with its line number
instead of an hour into a run. Tokenizing goes through mlx-lm's `ChatDataset` with
`mask_prompt=True`: the loss then falls on the assistant's answer only, exactly as
`mlx_lm.lora --mask-prompt` would train. When the folder has gen-sft's manifest.json,
its list of training secrets must not touch eval's held-out split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlx_lm.tuner.datasets import ChatDataset

from common.errors import UserError
from common.fileio import parse_json, read_json, read_jsonl
from eval.splits import SFT_SPLITS, held_out

Conversation = list[dict[str, str]]
# mlx-lm's tokenized example: (token ids of the whole chat, number of prompt tokens).
Tokenized = tuple[list[int], int]

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class SFTData:
    folder: Path
    train: list[Conversation]
    valid: list[Conversation]
    test: list[Conversation]


def load_data_dir(folder: str | Path) -> SFTData:
    """The three splits of a data folder; only `train.jsonl` must exist (and hold examples)."""
    folder = Path(folder)
    if folder.is_file():
        raise UserError(f"--data {folder} is a file; give the folder that holds it and the other splits, as gen-sft "
                        f"writes them: --data {folder.parent}")
    if not folder.is_dir():
        raise UserError(f"--data {folder} does not exist; make it with gen-sft --out {folder}")
    if not (folder / "train.jsonl").is_file():
        raise UserError(f"{folder} has no train.jsonl (expected gen-sft's output: train/valid/test.jsonl)")
    splits = {name: read_conversations(folder / f"{name}.jsonl") if (folder / f"{name}.jsonl").is_file() else []
              for name in SFT_SPLITS}
    if not splits["train"]:
        raise UserError(f"{folder / 'train.jsonl'} holds no examples")
    check_no_held_out_secrets(folder)
    return SFTData(folder, splits["train"], splits["valid"], splits["test"])


def check_no_held_out_secrets(folder: Path) -> None:
    """Refuse data made from eval's held-out secrets: training on them would inflate every eval."""
    path = folder / "manifest.json"
    if not path.is_file():
        return
    secrets = read_json(path, "gen-sft manifest").get("secrets", {})
    train = secrets.get("train", []) if isinstance(secrets, dict) else None
    if not isinstance(train, list) or not all(isinstance(word, str) for word in train):
        raise UserError(f"{path} is not a gen-sft manifest: secrets.train must be a list of words")
    leaked = held_out(train)
    if leaked:
        raise UserError(f"{folder} was made from eval's held-out secrets ({', '.join(leaked[:3])}); "
                        "regenerate it with gen-sft")


def read_conversations(path: Path) -> list[Conversation]:
    """Every non-blank line of `path` as a checked conversation."""
    return [parse_line(line, f"{path} line {number}") for number, line in read_jsonl(path, "data file")]


def parse_line(line: str, where: str) -> Conversation:
    record = parse_json(line, where, kind=None)
    if not isinstance(record, dict) or "messages" not in record:
        raise UserError(f'{where}: expected an object with a "messages" list (mlx-lm chat format)')
    return check_conversation(record["messages"], where)


def check_conversation(messages, where: str) -> Conversation:
    """A user turn, then the assistant's answer last: the only shape SFT can learn from."""
    if not isinstance(messages, list) or not messages:
        raise UserError(f'{where}: "messages" must be a non-empty list')
    for i, message in enumerate(messages):
        if not (isinstance(message, dict) and message.get("role") in ROLES
                and isinstance(message.get("content"), str)):
            raise UserError(f"{where}: message {i} needs a role ({', '.join(ROLES)}) and a text content")
    if messages[-1]["role"] != "assistant":
        raise UserError(f"{where}: the last message must be the assistant's answer (no assistant turn to learn)")
    if not any(m["role"] == "user" for m in messages[:-1]):
        raise UserError(f"{where}: no user message before the assistant's answer")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def tokenize(tokenizer, conversations: list[Conversation]) -> list[Tokenized]:
    """Token ids and prompt length of each conversation, through mlx-lm's ChatDataset."""
    dataset = ChatDataset([{"messages": c} for c in conversations], tokenizer, mask_prompt=True)
    return [dataset.process(dataset[i]) for i in range(len(dataset))]


def check_lengths(examples: list[Tokenized], max_seq_len: int, split: str) -> None:
    """Refuse examples that would be cut: a truncated answer teaches the model to stop mid-guess."""
    longest = max((len(tokens) for tokens, _ in examples), default=0)
    if longest > max_seq_len:
        raise UserError(f"--max-seq-len {max_seq_len} is too small: the longest {split} example has "
                        f"{longest} tokens")


def prompt_of(conversation: Conversation) -> Conversation:
    """The conversation without its answer: what the model is asked."""
    return conversation[:-1]
