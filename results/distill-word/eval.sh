#!/bin/bash
# issue 83, session 64: every evaluation in results/distill-word (outputs first written to runs/eval83b, then copied here)
# 1. every token spelled, no anchors (the study model, fused like distill does), then with 200 anchors: 400 held-out test positions
# (spelled-*.json are kept here as output-no-anchors-*.json)
R=runs/eval83b
M=runs/spelled-model
S=results/distill-head
python cli.py eval --model $M --endgame --split test --positions 400 --seed 4 --batch-size 64 \
    --json $R/spelled-endgame-test-400.json --quiet
python cli.py eval --compare $S/start-endgame-test-400.json $R/spelled-endgame-test-400.json --json $R/paired-spelled-endgame-test-400.json
M=runs/d2/model   # every token spelled, 200 anchors
python cli.py eval --model $M --endgame --split test --positions 400 --seed 4 --batch-size 64 \
    --json $R/output-endgame-test-400.json --quiet
python cli.py eval --compare $S/start-endgame-test-400.json $R/output-endgame-test-400.json --json $R/paired-output-endgame-test-400.json
# 2. the choice between the two anchored layers on validation positions
python cli.py eval --model runs/d2/model --endgame --split validation --positions 200 --seed 1 --batch-size 64 --json $R/output-endgame-validation-200.json --quiet
python cli.py eval --model runs/d3/model --endgame --split validation --positions 200 --seed 1 --batch-size 64 --json $R/opening-endgame-validation-200.json --quiet
python cli.py eval --model default --adapter llm/sft_start --endgame --split validation --positions 200 --seed 1 --batch-size 64 --json $R/start-endgame-validation-200.json --quiet
for V in output opening; do python cli.py eval --compare $R/start-endgame-validation-200.json $R/$V-endgame-validation-200.json --json $R/paired-$V-endgame-validation-200.json; done
# 3. the chosen model on the test secrets (the start at seed 4 first)
python cli.py eval --model default --adapter llm/sft_start --split test --games 128 --seed 4 --json $R/start-test-128-seed4.json --quiet
python cli.py eval --model runs/d3/model --split test --games 128 --seed 4 --json $R/openings-test-128-seed4.json --quiet
python cli.py eval --compare $R/start-test-128-seed4.json $R/openings-test-128-seed4.json --json $R/paired-openings-test-128-seed4.json
python cli.py eval --model default --adapter llm/sft_start --split test --games 128 --seed 5 --json $R/start-test-128-seed5.json --quiet
python cli.py eval --model runs/d3/model --split test --games 128 --seed 5 --json $R/openings-test-128-seed5.json --quiet
python cli.py eval --compare $R/start-test-128-seed5.json $R/openings-test-128-seed5.json --json $R/paired-openings-test-128-seed5.json
python cli.py eval --model runs/d3/model --endgame --split test --positions 400 --seed 4 --batch-size 64 \
    --json $R/openings-endgame-test-400.json --quiet
python cli.py eval --compare results/distill-head/start-endgame-test-400.json $R/openings-endgame-test-400.json \
    --json $R/paired-openings-endgame-test-400.json
python -m studies.named_words results/distill-head/start-endgame-test-400.json $R/output-endgame-test-400.json $R/openings-endgame-test-400.json --json $R/named-words.json
