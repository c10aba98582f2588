#!/bin/bash
# issue 83's evaluation: the plain start against the distilled model, both without any head, same positions/secrets
set -x
cd /work/main
R=runs/eval83
for M in "llm/sft_start start" "runs/d1/best distill"; do set -- $M
  python cli.py eval --model default --adapter $1 --endgame --split test --positions 400 --seed 4 --batch-size 64 \
      --json $R/$2-endgame-test-400.json --quiet
  python cli.py eval --model default --adapter $1 --endgame --split train --positions 200 --seed 4 --batch-size 64 \
      --json $R/$2-endgame-train-200.json --quiet
done
python cli.py eval --compare $R/start-endgame-test-400.json $R/distill-endgame-test-400.json --json $R/paired-endgame-test-400.json
python cli.py eval --compare $R/start-endgame-train-200.json $R/distill-endgame-train-200.json --json $R/paired-endgame-train-200.json
for M in "llm/sft_start start" "runs/d1/best distill"; do set -- $M
  python cli.py eval --model default --adapter $1 --split test --games 128 --seed 4 --json $R/$2-test-128-seed4.json --quiet
done
python cli.py eval --compare $R/start-test-128-seed4.json $R/distill-test-128-seed4.json --json $R/paired-test-128-seed4.json
