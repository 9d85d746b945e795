#!/usr/bin/env bash
# One device call: unpack Ray, build the kernels, then the whole system at several settings (bench_system --gpu).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/site && tar -xJf .devbundle/site.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 FOXHUNT_EXT_DIR=/tmp/fhext
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv
t0=$SECONDS
python3 benchmarks/gpu_check.py build > /tmp/build.log 2>&1; echo "build rc=$? in $((SECONDS - t0)) s"; tail -2 /tmp/build.log
SECS=${SECS:-55}
run() {  # name, flags...
  local name=$1; shift
  local t=$SECONDS
  timeout $((SECS + 100)) python3 benchmarks/bench_system.py --gpu --seconds "$SECS" --json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  echo "=== $name rc=$? in $((SECONDS - t)) s: $*"
  grep -E "^(second half|\| learner|\| rollout|\| monitor|\| driver|env_steps_per_s|Traceback|[A-Za-z]*Error)" "$OUT/$name.log" | cut -c1-130
}
run levers_on
run levers_off --policy-device cpu --minibatch-envs 0 --rollout-workers 14 --envs-per-worker 2048 --broadcast-every 4
run minibatch128 --minibatch-envs 128
run cpu_policy --policy-device cpu
