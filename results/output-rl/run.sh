#!/bin/bash
# issue 83, session 69: RL on three gains of the distilled model's output layer (output-rl), from a fresh
# checkout (runs/ was empty). Outputs go to runs/ (ignored); the JSONs were then copied here.
set -e
# 1. the start's naming head and the distilled model, rebuilt as ../distill-words/ made them
rm -rf runs/start && cp -r llm/sft_start runs/start
python cli.py naming-head --adapter runs/start --positions 640 --seed 7 --epochs 800      # states 13 min, fit 7 min
python cli.py distill --adapter runs/start --out runs/d9 --positions 2000 --validation-positions 200 \
    --answer-positions 100 --epochs 12 --seed 1 --spelled words --json runs/log/d9-summary.json   # 35 + 12 min
# 2. RL on the three gains. Own training positions: ../distill-own/'s games of runs/d3/model on untaught
#    training answers; own validation positions: ../distill-words/'s 90 validation games of runs/d9/model.
#    First without the KL (at 824435f: no-kl-*), then with --kl-coef 1 (the default since 6b0e133: kl1-*),
#    the second reusing the first's states.
python cli.py output-rl --distilled runs/d9 --out runs/orl --own-games results/distill-own/d3-untaught-160.json \
    --own-validation results/distill-words/words-validation.json --json runs/log/orl-summary.json   # 10 min pass
mkdir -p runs/orl-k1 && cp runs/orl/states.npz runs/orl-k1/
python cli.py output-rl --distilled runs/d9 --out runs/orl-k1 --own-games results/distill-own/d3-untaught-160.json \
    --own-validation results/distill-words/words-validation.json --kl-coef 1 --json runs/log/orl-k1-summary.json
# 3. held-out test games, seeds 4 and 5, paired with the start's (../distill-word/) and the distilled model's (../distill-words/)
for S in 4 5; do
python cli.py eval --model runs/orl-k1/model --split test --games 128 --seed $S --json runs/log/orl-test-128-seed$S.json --quiet
python cli.py eval --compare results/distill-word/start-test-128-seed$S.json runs/log/orl-test-128-seed$S.json --json runs/log/paired-orl-test-128-seed$S.json
python cli.py eval --compare results/distill-words/words-test-128-seed$S.json runs/log/orl-test-128-seed$S.json --json runs/log/paired-orl-vs-words-test-128-seed$S.json
done
