"""Time the naming head's state passes as a checkout of this repository runs them.

Runs whichever tree is first on PYTHONPATH with that tree's own `load_model` (the adapter folded in
where that tree can) and `naming_states`, so that an old commit and today's are measured the same
way on one machine. Prints one JSON line (seconds, seconds a position, a digest of the contexts so
two trees can be checked to have run the same ones) and saves the states for comparison.

    PYTHONPATH=. python bench/head_states_of_tree.py 64 states.npy
"""

from llm.blas import ensure_fast_blas

ensure_fast_blas()  # before mlx loads

import hashlib  # noqa: E402
import inspect
import json
import sys
import time

import numpy as np

from llm.loading import load_model
from rl.naming_head import HeadSettings, head_positions, naming_context, naming_states

count, out = int(sys.argv[1]), sys.argv[2]
fold = {"fuse": True} if "fuse" in inspect.signature(load_model).parameters else {}
model, tokenizer = load_model("default", "llm/sft_start", **fold)
positions = head_positions(HeadSettings(positions=count, validation_positions=1, seed=0))["train"]
contexts = [naming_context(tokenizer, p) for p in positions]
naming_states(model, tokenizer, positions[:2])  # warm-up
began = time.perf_counter()
states = naming_states(model, tokenizer, positions)
seconds = time.perf_counter() - began
np.save(out, states)
print(json.dumps({"positions": count, "seconds": round(seconds, 2), "s_per_position": round(seconds / count, 4),
                  "contexts_sha": hashlib.sha256(json.dumps(contexts).encode()).hexdigest()[:16],
                  "fuse": bool(fold)}))
