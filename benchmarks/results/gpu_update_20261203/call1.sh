# Session 6, call 1: build, kernel checks (iqn_head included), sanitizers, the TF32 tolerance test, graph vs eager,
# and the part-3 timing table (kernels vs reference ops in the same graph, fp32 and TF32).
set -uo pipefail
mkdir -p /tmp/site && tar -xJf .devbundle/site.tar.xz -C /tmp/site
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 FOXHUNT_EXT_DIR=/tmp/fhext
L=$OUT/all.log
step() { local name=$1; shift; local t0=$SECONDS; echo "=== $name: $*" >> $L; "$@" >> $L 2>&1; local rc=$?; echo "=== $name rc=$rc $((SECONDS-t0)) s" | tee -a $L; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; python3 -c "import torch;print(torch.__version__)"; } >> $L
step build python3 benchmarks/gpu_check.py build
grep -iE "error|warning: " $L | head -20
step checks python3 benchmarks/gpu_check.py checks --json $OUT/checks.json
grep -A40 "worst rel err" $L | head -45
step memcheck env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 python3 benchmarks/gpu_check.py sanitize
step racecheck compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 --print-limit 20 --kernel-name kns=foxhunt python3 benchmarks/gpu_check.py sanitize
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|ops run" $L | tail -6
step pytest env FOXHUNT_TF32_REPORT=$OUT/tf32.json python3 -m pytest -q -s -p no:cacheprovider tests/test_learner_cuda.py tests/test_ops_library.py
cat $OUT/tf32.json 2>/dev/null; grep -E "passed|failed|Error" $L | tail -5
step graphcheck python3 benchmarks/gpu_check.py graphcheck --json $OUT/graphcheck.json
grep -E "graphcheck:|PASSED|FAILED" $L | tail -3
step update python3 benchmarks/gpu_check.py update --reps 200 --json $OUT/update.json
tail -7 $L
