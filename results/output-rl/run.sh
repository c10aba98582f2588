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
# --- session 70 (5c3bab1) ---
# 4. one-left positions read after the model's own text. Run at e893838, before --turns existed, whose said_context
#    read the 100 answers that list candidates right after "possible words:"; today's reads them one sentence later,
#    before the guess's bits, so this command today differs from said-one-left-* at those positions
python cli.py output-rl --distilled runs/d9 --out runs/orl-said --turns one-left --own-games results/distill-own/d3-untaught-160.json \
    --own-validation results/distill-words/words-validation.json --json runs/log/orl-said-summary.json   # said-one-left-*
# 5. every answer of its own games (--turns every, the default), then session 69's gains read at those positions
python cli.py output-rl --distilled runs/d9 --out runs/orl-every --own-games results/distill-own/d3-untaught-160.json \
    --own-validation results/distill-words/words-validation.json --json runs/log/orl-every-summary.json   # every-*, 38 min pass
python -m studies.output_rl_gains --run runs/orl-every --gains 0.6807 1.19803 9.51135 --gains 0.68114 1.19642 9.49141 \
    --json runs/log/every-reads-one-left-gains.json
# 6. validation games (the same 90 secrets and seed as d9's ../distill-words/words-validation.json), then, only if it won
#    more than d9's 24 there, held-out test seeds 4 and 5 paired with the start and d9
python cli.py eval --model runs/orl-every/model --split validation --games 90 --seed 11 --json runs/log/orl-every-validation.json --quiet
python cli.py eval --compare results/distill-words/words-validation.json runs/log/orl-every-validation.json --json runs/log/paired-orl-every-validation.json
for S in 4 5; do
python cli.py eval --model runs/orl-every/model --split test --games 128 --seed $S --json runs/log/orl-every-test-128-seed$S.json --quiet
python cli.py eval --compare results/distill-word/start-test-128-seed$S.json runs/log/orl-every-test-128-seed$S.json --json runs/log/paired-orl-every-test-128-seed$S.json
python cli.py eval --compare results/distill-words/words-test-128-seed$S.json runs/log/orl-every-test-128-seed$S.json --json runs/log/paired-orl-every-vs-words-test-128-seed$S.json
done
# 7. what each model lists in its thought with several candidates left (d9 and session 69's gains, test games)
python -m studies.listed_words --games results/distill-words/words-test-128-seed4.json --games results/output-rl/orl-test-128-seed4.json \
    --games results/distill-words/words-test-128-seed5.json --games results/output-rl/orl-test-128-seed5.json --json results/output-rl/listed-words-test.json
# 8. the bias along a direction ~1 at the naming states and ~0 at the anchor rows (a study; the states of step 5 reused),
#    then the same validation games
python -m studies.localised_bias --distilled runs/d9 --out runs/orl-local --states runs/orl-every/states.npz \
    --own-games results/distill-own/d3-untaught-160.json --own-validation results/distill-words/words-validation.json \
    --json runs/log/orl-local-summary.json   # local-*
python cli.py eval --model runs/orl-local/model --split validation --games 90 --seed 11 --json runs/log/orl-local-validation.json --quiet
python cli.py eval --compare results/distill-words/words-validation.json runs/log/orl-local-validation.json --json runs/log/paired-orl-local-validation.json
python -m studies.listed_words --games results/distill-words/words-validation.json --games results/output-rl/local-validation.json \
    --json results/output-rl/listed-words-local-validation.json
# 9. (session 71) the three gains by a sampled policy gradient: whole training games played with the tuned layer,
#    REINFORCE over every token written (a study; the states of step 5 reused), stopped after 8 steps of 32 games,
#    then the frozen objective's exact slopes at d9 beside the sampled ones, then the same validation games
python -m studies.sampled_gains --distilled runs/d9 --out runs/orl-sampled --states runs/orl-every/states.npz \
    --own-games results/distill-own/d3-untaught-160.json --own-validation results/distill-words/words-validation.json \
    --steps 8 --games 32   # sampled-metrics.jsonl, sampled-games/
python -m studies.output_rl_gains --run runs/orl-every --gains 0.9004 1.35917 4.43675 --json results/output-rl/every-slopes.json
python -m studies.sampled_gradient --metrics runs/orl-sampled/sampled_metrics.jsonl --slopes results/output-rl/every-slopes.json \
    --json results/output-rl/sampled-gradient.json
python cli.py eval --model runs/orl-sampled/model --split validation --games 90 --seed 11 --json runs/log/orl-sampled-validation.json --quiet
python cli.py eval --compare results/distill-words/words-validation.json runs/log/orl-sampled-validation.json --json runs/log/paired-orl-sampled-validation.json
# 10. (session 72) the same study with each secret played 4 times a step (--group-size 4: 8 secrets of 4 games),
#     the baseline over a secret's games at each turn; both baselines' gradients logged on the same answers
python -m studies.sampled_gains --distilled runs/d9 --out runs/orl-grouped --states runs/orl-every/states.npz \
    --own-games results/distill-own/d3-untaught-160.json --own-validation results/distill-words/words-validation.json \
    --steps 4 --games 32 --group-size 4   # grouped-metrics.jsonl
python -m studies.sampled_gradient --metrics runs/orl-grouped/sampled_metrics.jsonl --slopes results/output-rl/every-slopes.json \
    --json results/output-rl/grouped-gradient.json
# 11. (session 72) groups at a shared position: 32 positions a step drawn from the games of steps 9 and 10, each
#     answered 8 times (one turn), the baseline the other 7 answers there (leave-one-out)
python -m studies.sampled_gains --distilled runs/d9 --out runs/orl-positions --states runs/orl-every/states.npz \
    --own-games results/distill-own/d3-untaught-160.json --own-validation results/distill-words/words-validation.json \
    --steps 3 --games 256 --group-size 8 \
    $(for f in runs/orl-sampled/games/step-00{3,4,5,6,7,8}.json runs/orl-grouped/games/step-00{1,2,3,4}.json; do
        echo --positions-from $f; done)   # positions-metrics.jsonl
python -m studies.sampled_gradient --metrics runs/orl-positions/sampled_metrics.jsonl \
    --slopes results/output-rl/every-slopes.json --json results/output-rl/positions-gradient.json
