#!/usr/bin/env bash
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site && tar -xJf .devbundle/site.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 FOXHUNT_EXT_DIR=/tmp/fhext
python3 benchmarks/gpu_check.py build > /tmp/build.log 2>&1; echo "build rc=$?"
timeout 150 python3 benchmarks/bench_system.py --gpu --seconds 40 --json "$OUT/run5_gpu_mb256.json" > "$OUT/run5_gpu_mb256.log" 2>&1
echo "rc=$?"; grep -E "^(second half|\| learner|\| rollout|env_steps_per_s|Traceback|[A-Za-z]*Error)" "$OUT/run5_gpu_mb256.log" | cut -c1-125
