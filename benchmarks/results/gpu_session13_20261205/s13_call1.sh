# NOT RUN: planned for session 13, but no device machine could be started for it (about fourteen failed starts between 12:47 and 14:47 UTC); kept for the next session.
# Session 13 call 1: issue 12 re-checked in one call on HEAD (029ab5c): build, every kernel against its reference,
# the learner's CUDA tests (graph against eager, TF32 tolerances), compute-sanitizer memcheck and racecheck, the
# op timings, the part-3 update table (custom kernels against the reference ops in the same graph), then the whole
# system (bench_system --gpu, 12 rollout actors) on seeds 0 and 1.
L=$OUT/call1.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step gpu_check_all timeout 300 bash benchmarks/gpu_check.sh all
tail -30 $OUT/gpu_check.log | grep -E "rc=|passed|failed|ms" | tail -20
step sys0 timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --rollout-workers 12 --json $R/sys0.json
step sys1 timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 1 --rollout-workers 12 --json $R/sys1.json
grep -E "env_steps_per_s=|policy lag" $L | tail -4
finish
