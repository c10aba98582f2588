set -x
V=results/distill-own/d3-validation.json
G=results/distill-own/d3-untaught-160.json
python -m studies.last_guess_probe top --games $V runs/d3/model runs/d4/model runs/d7/model > results/distill-head-rl/last-guess-top.jsonl
python -m studies.last_guess_probe scale --games $V --positions 120 > results/distill-head-rl/last-guess-scale.jsonl
python -m studies.last_guess_probe heads --games $G --validation $V --head runs/start-rl/best --steps 60 > results/distill-head-rl/last-guess-heads.jsonl
