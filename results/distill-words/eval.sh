#!/bin/bash
# issue 83, session 68: the output layer spelled at whole allowed words only (runs/d9/model), outputs in runs/eval83c, then copied here
set -e
R=runs/eval83c; mkdir -p $R
W=results/distill-word
M=runs/d9/model
# 1. the choice on validation endgame positions, against the start and the openings model (their files from ../distill-word/)
python cli.py eval --model $M --endgame --split validation --positions 200 --seed 1 --batch-size 64 --json $R/words-endgame-validation-200.json --quiet
python cli.py eval --compare $W/start-endgame-validation-200.json $R/words-endgame-validation-200.json --json $R/paired-words-endgame-validation-200.json
python cli.py eval --compare $W/opening-endgame-validation-200.json $R/words-endgame-validation-200.json --json $R/paired-words-vs-openings-endgame-validation-200.json
# 2. whole games on the validation secrets, the same 90 as ../distill-own/ (runs/d3/model: d3-validation.json there)
python cli.py eval --model $M --split validation --seed 11 --json $R/words-validation.json --quiet
python cli.py eval --compare results/distill-own/d3-validation.json $R/words-validation.json --json $R/paired-words-vs-openings-validation.json
# 3. chosen on validation (24 against 17 wins): the held-out test secrets, seeds 4 and 5, against the start's games there (../distill-word/)
for S in 4 5; do
python cli.py eval --model $M --split test --games 128 --seed $S --json $R/words-test-128-seed$S.json --quiet
python cli.py eval --compare $W/start-test-128-seed$S.json $R/words-test-128-seed$S.json --json $R/paired-words-test-128-seed$S.json
python cli.py eval --compare $W/openings-test-128-seed$S.json $R/words-test-128-seed$S.json --json $R/paired-words-vs-openings-test-128-seed$S.json
done
# 4. memory or skill: the endgame benchmark on training secrets and on the held-out test positions of ../distill-word/
python cli.py eval --model $M --endgame --split train --positions 200 --seed 0 --batch-size 64 --json $R/words-endgame-train-200.json --quiet
python cli.py eval --model default --adapter llm/sft_start --endgame --split train --positions 200 --seed 0 --batch-size 64 --json $R/start-endgame-train-200.json --quiet
python cli.py eval --compare $R/start-endgame-train-200.json $R/words-endgame-train-200.json --json $R/paired-words-endgame-train-200.json
python cli.py eval --model $M --endgame --split test --positions 400 --seed 4 --batch-size 64 --json $R/words-endgame-test-400.json --quiet
python cli.py eval --compare results/distill-head/start-endgame-test-400.json $R/words-endgame-test-400.json --json $R/paired-words-endgame-test-400.json
# 5. the start's seed-4 games measured again with today's code (the baseline above is session 64's)
python cli.py eval --model default --adapter llm/sft_start --split test --games 128 --seed 4 --json $R/start-test-128-seed4-again.json --quiet
# 6. the readings of the games (files written straight here)
python -m studies.lost_games results/distill-own/d3-validation.json $R/words-validation.json --json results/distill-words/lost-games-validation.json
python -m studies.lost_games $W/start-test-128-seed4.json $R/words-test-128-seed4.json $W/start-test-128-seed5.json $R/words-test-128-seed5.json --json results/distill-words/lost-games-test.json
python -m studies.win_positions $W/start-test-128-seed4.json $W/openings-test-128-seed4.json $R/words-test-128-seed4.json \
    $W/start-test-128-seed5.json $W/openings-test-128-seed5.json $R/words-test-128-seed5.json --json results/distill-words/win-positions-test.json
python -m studies.named_words $W/start-endgame-validation-200.json $W/opening-endgame-validation-200.json $R/words-endgame-validation-200.json \
    --json results/distill-words/named-words-endgame-validation.json
# 7. runs/uw: runs/attn/m-ul1 (../attention-lora/'s U fit, fused) with runs/d9/model's lm_head written into it
#    (llm/spelled_output.py write_output_layer), on the same 90 validation games
python cli.py eval --model runs/uw --split validation --seed 11 --json $R/uw-validation.json --quiet
python cli.py eval --compare $R/words-validation.json $R/uw-validation.json --json $R/paired-uw-vs-words-validation.json
python -m studies.lost_games $R/words-validation.json $R/uw-validation.json --json results/distill-words/lost-games-uw-validation.json
