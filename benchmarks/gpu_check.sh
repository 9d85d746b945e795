#!/usr/bin/env bash
# The GPU machine's one call: build the extension, run the CUDA tests with pytest (every kernel against the
# reference, gradients, opcheck: tests/test_kernels_cuda.py; the captured graph against eager, minibatch steps,
# TF32: tests/test_learner_cuda.py; the ops' test files), run compute-sanitizer (memcheck, racecheck) on the ops at
# B=128, time the ops, the Learner.update and the part-3 update table.
#   benchmarks/gpu_check.sh [all|kernels|learner]
#     kernels = build+checks+sanitizer+ops; learner = build+timings
# The device image has no pytest: the checks stage takes it from .devbundle/site.tar.xz
# (../shared/tools/device-bundle; carry .devbundle along) when `import pytest` fails.
# Logs and JSON go to $OUT (the device tool's folder) or benchmarks/results/<utc stamp>/; a short table of
# each stage is printed last. Exit status 1 if any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=${1:-all}
OUT=${OUT:-benchmarks/results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export FOXHUNT_EXT_DIR=${FOXHUNT_EXT_DIR:-$PWD/build/foxhunt_ext}
PY=${PYTHON:-python3}
LOG="$OUT/gpu_check.log"
failed=()

stage() {  # stage NAME CMD... : run, append to the log, remember failures
  local name=$1; shift
  echo "=== $name: $*" | tee -a "$LOG"
  local t0=$SECONDS
  "$@" 2>&1 | tee -a "$LOG" > "$OUT/.last"
  local rc=${PIPESTATUS[0]}
  echo "=== $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$LOG"
  [ "$rc" -eq 0 ] || failed+=("$name")
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  nvcc --version | tail -2
  $PY -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
} >> "$LOG" 2>&1

if [ "$STAGE" = all ] || [ "$STAGE" = kernels ]; then
  stage build $PY benchmarks/gpu_check.py build
  TESTPATH=${PYTHONPATH:-}
  if ! $PY -c 'import pytest' 2>/dev/null; then
    mkdir -p /tmp/site && tar -xJf .devbundle/site.tar.xz -C /tmp/site && TESTPATH=$PWD:/tmp/site${TESTPATH:+:$TESTPATH}
  fi
  # FOXHUNT_REQUIRE_CUDA: a GPU test skipped for want of a GPU fails instead. checks.json: every check's error.
  stage checks env PYTHONPATH="$TESTPATH" FOXHUNT_REQUIRE_CUDA=1 FOXHUNT_KERNEL_REPORT="$OUT/checks.json" \
    FOXHUNT_TF32_REPORT="$OUT/tf32.json" $PY -m pytest -q -rs -p no:cacheprovider tests/test_kernels_cuda.py \
    tests/test_learner_cuda.py tests/test_ops_library.py tests/test_ops_reference.py tests/test_cuda_compile.py
  tail -12 "$OUT/.last"
  # No caching allocator under memcheck, so an out-of-bounds access hits unallocated memory and is caught.
  stage memcheck env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
    --print-limit 20 $PY benchmarks/gpu_check.py sanitize
  tail -4 "$OUT/.last"
  stage racecheck compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 --print-limit 20 \
    --kernel-name kns=foxhunt $PY benchmarks/gpu_check.py sanitize
  tail -4 "$OUT/.last"
  stage ops $PY benchmarks/gpu_check.py ops --json "$OUT/ops.json"
  tail -12 "$OUT/.last"
fi
if [ "$STAGE" = all ] || [ "$STAGE" = learner ]; then
  [ "$STAGE" = all ] || stage build $PY benchmarks/gpu_check.py build
  stage update $PY benchmarks/gpu_check.py update --json "$OUT/update.json"
  tail -6 "$OUT/.last"
  stage learner $PY benchmarks/gpu_check.py learner --json "$OUT/learner.json" --preset phase4_3 --T 8 --B 128
  tail -14 "$OUT/.last"
fi
rm -f "$OUT/.last"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED stages: ${failed[*]}"
  exit 1
fi
echo "all stages passed"
