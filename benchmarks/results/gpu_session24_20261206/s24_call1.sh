# session 24, call 1: issue 12 on the current code in one call. gpu_check.sh kernels (build, every kernel against its
# reference and the learner's CUDA tests, memcheck, racecheck, ops); the update timing (float32 and TF32, custom and
# reference ops in the same graph) of three learners: new (this tree: pi and V_scalar as one product, the IQN
# midpoints' mean folded into the output weight), split (be2b1ff: the encoder's output split) and base (b753cb3,
# before the split), their learner.py and network.py swapped in from .devtools/variants/; the device time by kernel
# and the update's kernels at 64 x 128 named by launching op and shapes (new); then the whole system
# (bench_system.py --gpu, 40 s) on seeds 0 and 1. Copy into .devtools/ with s14_lib.sh (../gpu_session15_20261205/)
# and the variants (git show b753cb3:learner/{learner,network}.py and HEAD's before this session's change); carry
# .devbundle and .devtools.
L=$OUT/spike_check.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
mkdir -p $OUT/checks
step kernels env OUT=$OUT/checks FOXHUNT_EXT_DIR=/tmp/fhext timeout 240 bash benchmarks/gpu_check.sh kernels
grep -E "passed|failed|ERROR SUMMARY|RACECHECK SUMMARY" $OUT/checks/gpu_check.log | tail -4
step update_new timeout 90 python3 benchmarks/gpu_check.py update --json $R/update_new.json
grep -E "^[0-9]+x[0-9]+ +(highest|high)" $L | tail -4
mkdir -p /tmp/variants/new/learner && cp learner/learner.py learner/network.py /tmp/variants/new/learner/
for v in split base; do
  cp .devtools/variants/$v/learner/*.py learner/
  step update_$v timeout 90 python3 benchmarks/gpu_check.py update --json $R/update_$v.json
  grep -E "^[0-9]+x[0-9]+ +(highest|high)" $L | tail -4
done
cp /tmp/variants/new/learner/*.py learner/
step kprof timeout 60 python3 benchmarks/gpu_check.py kernels --json $R/kernels.json
step regions64 timeout 90 python3 benchmarks/gpu_check.py regions --shapes --T 64 --json $R/regions64.json
for s in 0 1; do
  [ $SECONDS -lt 430 ] || break
  step bench$s timeout 150 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed $s --json $R/bench$s.json
  grep -E "^env_steps_per_s" $L | tail -1
done
finish
