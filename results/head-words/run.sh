#!/bin/bash
# issue 83, session 75: the naming head folded into the model as one token per allowed word
# (`export --fold-head`, llm/head_words.py, sft/fold_head.py), so the head player is a plain mlx-lm model.
# Two-core AMD EPYC, float32 + MKL. Outputs in runs/, then copied here.
set -e
# 0. the start with the default 2,560-position head (as ../distill-share/run.sh step 1; 25 min of states)
# rm -rf runs/s25 && cp -r llm/sft_start runs/s25 && python cli.py naming-head --adapter runs/s25 --seed 7
R=runs/evalc; D=results/head-words; mkdir -p $R
# 1. x5: the export at commit 48a2b03 (answers re-read through word tokens, words open in the tag; 9 min)
#    git checkout 48a2b03 && python cli.py export --adapter runs/s25 --out runs/x5 --fold-head --json $D/x5-export.json
python cli.py eval --model runs/x5 --endgame --split validation --positions 200 --seed 1 --batch-size 64 \
  --json $D/x5-endgame.json --quiet
# 2. x6: the product's design from commit 1d6bb79 on (x3's: longer words read as their row's direction, shut in the tag)
python cli.py export --adapter runs/s25 --out runs/x6 --fold-head --json $D/x6-export.json
python cli.py eval --model runs/x6 --endgame --split validation --positions 200 --seed 1 --batch-size 64 \
  --json $D/x6-endgame.json --quiet
# 3. the head player on the same positions, and the pairings with the distilled model of ../distill-words/
python cli.py eval --model default --adapter runs/s25 --endgame --split validation --positions 200 --seed 1 \
  --batch-size 64 --json $D/s25head-endgame.json --quiet
for m in x3 x6 s25head; do
  python cli.py eval --compare results/distill-words/words-endgame-validation-200.json $D/$m-endgame.json \
    --json $D/paired-$m-vs-distilled-endgame.json
done
python cli.py eval --compare $D/s25head-endgame.json $D/x6-endgame.json --json $D/paired-x6-vs-head-endgame.json
