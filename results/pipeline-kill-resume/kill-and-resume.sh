#!/bin/bash
# The README's first command from a fresh clone, killed once at a random moment and run again.
set -u
rm -rf /tmp/fresh && git clone -q /work/main /tmp/fresh && cd /tmp/fresh
KILL_AT=$(python -c "import random; print(random.randint(60, 1500))")
echo "commit $(git rev-parse --short HEAD) kill_at ${KILL_AT}s start $(date -u +%T)" > /tmp/mainjob.times
start=$(date +%s)
(pip install -q -e . && python cli.py pipeline --out runs/demo) > run1.log 2>&1 &
sleep "$KILL_AT"
pkill -9 -f "cli.py pipeline --out runs/demo"
wait
killed=$(date +%s)
echo "killed at $((killed - start))s $(date -u +%T)" >> /tmp/mainjob.times
(pip install -q -e . && python cli.py pipeline --out runs/demo) > run2.log 2>&1
echo "rc $? second run $(( $(date +%s) - killed ))s total $(( $(date +%s) - start ))s end $(date -u +%T)" >> /tmp/mainjob.times
