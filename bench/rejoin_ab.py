"""A/B eval: python -m bench.rejoin_ab MODE GAMES BATCH OUT.json ; MODE rounds|cont"""
import sys
from llm.blas import ensure_fast_blas
ensure_fast_blas()
mode, games, batch, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
if mode == "cont":
    from llm import player as P
    from llm.format import Move, parse_answer
    def finished(self):
        moves = []
        while self._asked and not moves:
            for group, (completion,) in self._stream.finished():
                game, state = self._asked.pop(group)
                parsed = parse_answer(completion.text, state.lists, state.guesses)
                moves.append((game, Move(parsed.guess, completion.text, parsed.failure)))
        return moves
    P.ModelPlayer.finished = finished
import time
from cli import cli as main
t = time.time()
try:
    main(["eval", "--model", "default", "--adapter", "llm/sft_start", "--split", "test", "--games", games,
          "--seed", "1", "--batch-size", batch, "--json", out], standalone_mode=False)
finally:
    print(mode, games, batch, "wall", round(time.time() - t, 1), file=sys.stderr)
