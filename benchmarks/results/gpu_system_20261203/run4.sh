#!/usr/bin/env bash
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site && tar -xJf .devbundle/site.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 FOXHUNT_EXT_DIR=/tmp/fhext
t0=$SECONDS
python3 benchmarks/gpu_check.py build > /tmp/build.log 2>&1; echo "build rc=$? in $((SECONDS - t0)) s"
timeout 120 python3 .devtools/minibatch_check.py > "$OUT/checks.log" 2>&1; echo "minibatch_check rc=$?"; grep "MINIBATCH" "$OUT/checks.log"
SECS=${SECS:-55}
run() {  # name, flags...
  local name=$1; shift
  local t=$SECONDS
  timeout $((SECS + 100)) python3 benchmarks/bench_system.py --gpu --seconds "$SECS" --json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  echo "=== $name rc=$? in $((SECONDS - t)) s: $*"
  grep -E "^(second half|\| learner|\| rollout|\| monitor|\| driver|env_steps_per_s|no timings|Traceback|[A-Za-z]*Error)" "$OUT/$name.log" | grep -v "| 0.000 |$" | cut -c1-125
}
run gpu_mb256
run gpu_mb128 --minibatch-envs 128
