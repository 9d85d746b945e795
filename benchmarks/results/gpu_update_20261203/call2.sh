# Session 6, call 2: kernel checks (iqn_head) + sanitizers + the TF32 tolerance test, then the whole system
# (bench_system --gpu) on two seeds at float32 matmuls and one at TF32.
set -uo pipefail
mkdir -p /tmp/site && tar -xJf .devbundle/site.tar.xz -C /tmp/site
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 FOXHUNT_EXT_DIR=/tmp/fhext
L=$OUT/all.log
step() { local name=$1; shift; local t0=$SECONDS; echo "=== $name: $*" >> $L; "$@" >> $L 2>&1; local rc=$?; echo "=== $name rc=$rc $((SECONDS-t0)) s" | tee -a $L; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; } >> $L
step build python3 benchmarks/gpu_check.py build
step checks python3 benchmarks/gpu_check.py checks --json $OUT/checks.json
grep -A30 "worst rel err" $L | grep -E "iqn|checks:|FAILED" | head -12
step memcheck env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 python3 benchmarks/gpu_check.py sanitize
step racecheck compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 --print-limit 20 --kernel-name kns=foxhunt python3 benchmarks/gpu_check.py sanitize
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|ops run" $L | tail -6
step pytest env FOXHUNT_TF32_REPORT=$OUT/tf32.json python3 -m pytest -q -p no:cacheprovider tests/test_learner_cuda.py
python3 -c "
import json; rows=json.load(open('$OUT/tf32.json'))
for r in rows: print(r['update'], 'worst rel %.2e (%s)' % max((v,k) for k,v in r['rel'].items()), 'qpa_abs %.2e' % r['qpa_abs'])"
for run in "s0 --seed 0" "s1 --seed 1" "tf32 --seed 0 --set learner.matmul_precision=high"; do
  set -- $run; name=$1; shift
  step sys_$name timeout 170 python3 benchmarks/bench_system.py --gpu --seconds 40 --json $OUT/sys_$name.json "$@"
  grep -E "^(second half|\| learner|\| rollout|env_steps_per_s|Traceback|[A-Za-z]*Error)" $L | tail -4 | cut -c1-150
done
