# session 24, call 2: this tree (the IQN embedding's bias gradient read off its weight gradient, on top of call 1's
# tree). On an H200 (the card issue 12 names): gpu_check.sh kernels (build, every kernel against its reference and the
# learner's CUDA tests, memcheck, racecheck, ops), the update timing of this tree and of call 1's (variant pv), the
# device time by kernel, the whole system (bench_system.py --gpu, 40 s) on seeds 0 and 1. On any other card: build,
# the CUDA tests, the two update timings, then the bare command on seeds 0 and 1 (spike_check.sh, EVALS=0) to see
# the learning beside session 23's 0.889 and 0.886. Copy into .devtools/ with s14_lib.sh (../gpu_session15_20261205/),
# ../gpu_session21_20261206/spike_check.sh and the variant (git show 3a0c6b3:learner/{learner,network}.py); carry
# .devbundle and .devtools.
L=$OUT/spike_check.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
timings() {
  step update_new timeout 90 python3 benchmarks/gpu_check.py update --json $R/update_new.json
  grep -E "^[0-9]+x[0-9]+ +(highest|high)" $L | tail -4
  mkdir -p /tmp/variants/new/learner && cp learner/learner.py learner/network.py /tmp/variants/new/learner/
  cp .devtools/variants/pv/learner/*.py learner/
  step update_pv timeout 90 python3 benchmarks/gpu_check.py update --json $R/update_pv.json
  grep -E "^[0-9]+x[0-9]+ +(highest|high)" $L | tail -4
  cp /tmp/variants/new/learner/*.py learner/
}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p $OUT/checks
  step kernels env OUT=$OUT/checks FOXHUNT_EXT_DIR=/tmp/fhext timeout 240 bash benchmarks/gpu_check.sh kernels
  grep -E "passed|failed|ERROR SUMMARY|RACECHECK SUMMARY" $OUT/checks/gpu_check.log | tail -4
  timings
  step kprof timeout 60 python3 benchmarks/gpu_check.py kernels --json $R/kernels.json
  for s in 0 1; do
    [ $SECONDS -lt 430 ] || break
    step bench$s timeout 150 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed $s --json $R/bench$s.json
    grep -E "^env_steps_per_s" $L | tail -1
  done
  finish
else
  step build timeout 150 python3 benchmarks/gpu_check.py build
  step cuda_tests timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_learner_cuda.py tests/test_kernels_cuda.py
  grep -E "passed|failed" $L | tail -2
  timings
  export SKIP_UPDATE=1 EVALS=0 LAST_START=330 RUNS="N0 0;N1 1"
  bash .devtools/spike_check.sh
fi
