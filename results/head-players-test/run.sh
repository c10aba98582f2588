#!/bin/bash
# issue 83, session 73: the main job's head players and the distilled model with a head, on the held-out
# test secrets of seeds 4 and 5 (128 games each, 0.7), paired with the plain start and the distilled model
# there. Inputs: runs/demo (python cli.py pipeline --out runs/demo, session 72's run, ../pipeline-amd-timing/),
# runs/d9 (../output-rl/run.sh step 1). Outputs go to runs/evalb, then copied here.
set -e
R=runs/evalb; mkdir -p $R
# the distilled model (a plain mlx-lm folder) with the main job's head-RL head copied in (eval reads a head
# in --model's folder when there is no --adapter): hard links, the 625 MB of weights not copied
cp -al runs/d9/model runs/d9h && cp runs/demo/rl/best/naming_head.npz runs/d9h/
for S in 4 5; do
python cli.py eval --model default --adapter runs/demo/rl/best --split test --games 128 --seed $S --json $R/headrl-test-128-seed$S.json --quiet
done
for S in 4 5; do
python cli.py eval --model runs/d9h --split test --games 128 --seed $S --json $R/d9head-test-128-seed$S.json --quiet
done
for S in 4 5; do
python cli.py eval --model default --adapter runs/demo/sft/adapter --split test --games 128 --seed $S --json $R/head-test-128-seed$S.json --quiet
done
# pairs: each player against the plain start and the distilled model (their games: ../distill-word/, ../distill-words/),
# (b) the distilled model with the head against the head-RL player, and head RL's own share (head alone vs head RL)
D=results/head-players-test
for S in 4 5; do
  for P in headrl d9head head; do
    python cli.py eval --compare results/distill-word/start-test-128-seed$S.json $R/$P-test-128-seed$S.json --json $D/paired-$P-vs-start-seed$S.json > /dev/null
    python cli.py eval --compare results/distill-words/words-test-128-seed$S.json $R/$P-test-128-seed$S.json --json $D/paired-$P-vs-distilled-seed$S.json > /dev/null
  done
  python cli.py eval --compare $R/headrl-test-128-seed$S.json $R/d9head-test-128-seed$S.json --json $D/paired-d9head-vs-headrl-seed$S.json > /dev/null
  python cli.py eval --compare $R/head-test-128-seed$S.json $R/headrl-test-128-seed$S.json --json $D/paired-headrl-vs-head-seed$S.json > /dev/null
done
cp $R/*-test-128-seed?.json $D/
python -m studies.lost_games results/distill-word/start-test-128-seed4.json results/distill-words/words-test-128-seed4.json \
    $D/head-test-128-seed4.json $D/headrl-test-128-seed4.json $D/d9head-test-128-seed4.json \
    results/distill-word/start-test-128-seed5.json results/distill-words/words-test-128-seed5.json \
    $D/head-test-128-seed5.json $D/headrl-test-128-seed5.json $D/d9head-test-128-seed5.json --json $D/lost-games.json
# a diagnostic, run beside the CI's slow tests: the distilled model with its <guess> tag decoded among unplayed allowed words
for S in 4 5; do
python cli.py eval --model runs/d9/model --constrain-guess --split test --games 128 --seed $S --json $R/d9constrained-test-128-seed$S.json --quiet
python cli.py eval --compare results/distill-words/words-test-128-seed$S.json $R/d9constrained-test-128-seed$S.json --json $D/paired-d9constrained-vs-distilled-seed$S.json > /dev/null
python cli.py eval --compare $R/d9constrained-test-128-seed$S.json $R/headrl-test-128-seed$S.json --json $D/paired-headrl-vs-d9constrained-seed$S.json > /dev/null
done
cp $R/d9constrained-test-128-seed?.json $D/
