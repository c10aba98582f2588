"""A/B eval: python -m bench.kept_caches_ab MODE GAMES OUT.json ; MODE base|keep (keep every answer's prompt cache for the game's next turn)"""
import sys, time
from llm.blas import ensure_fast_blas
ensure_fast_blas()
mode, games, out = sys.argv[1], sys.argv[2], sys.argv[3]
from llm import generation as G
if mode == "keep":
    from collections import deque
    orig_init = G.GroupStream.__init__
    def init(self, *a, **k):
        orig_init(self, *a, **k)
        self._recent = deque(maxlen=int(games))
    G.GroupStream.__init__ = init
    orig_insert = G.GroupStream._insert
    def _insert(self, request, inputs, cache):
        """Keep a single answer's prompt cache too (the stream keeps groups' itself)."""
        if cache and len(inputs) == 1 and len(request.samplers) == 1:
            self._recent.append((request.prompt[:-1], cache))
        orig_insert(self, request, inputs, cache)
    G.GroupStream._insert = _insert
import eval.run as R
orig = R.play_and_summarise
def pas(player, *a, **k):
    r = orig(player, *a, **k)
    print("passes", player.passes, file=sys.stderr)
    return r
R.play_and_summarise = pas
from cli import cli
t = time.time()
cli(["eval", "--model", "default", "--adapter", "llm/sft_start", "--split", "test", "--games", games,
     "--seed", "1", "--json", out], standalone_mode=False)
print(mode, games, "wall", round(time.time() - t, 1), file=sys.stderr)
