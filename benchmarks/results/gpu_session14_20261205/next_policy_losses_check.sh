# NOT RUN: written in session 14 (no device time left) for the branch policy-losses-kernel (also kept as
# policy_losses_kernel.patch beside this file: `git apply` it on 0f354d1 or later); the next device call.
# The fused on-policy losses (cuda/kernels/policy_losses.cu) on the GPU in one call: build, every kernel against the
# float64 reference (tests/kernel_checks.py now checks policy_losses' ten stats and its gradients), opcheck, the
# learner's CUDA tests (graph against eager, TF32), compute-sanitizer memcheck and racecheck, op timings, the part-3
# update table (custom kernels against the reference ops in the same graph; before: 1.83 / 2.51 ms at 8 x 128 and
# 2.35 / 3.29 ms at 64 x 128, session 10), the kernel profile (launch count per replay; before: 510 at 8 x 128), then
# the whole system once. Copy it and s14_lib.sh (beside it) into .devtools/ and run with the device tool (carry .devbundle and .devtools).
L=$OUT/call1.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step gpu_check_all timeout 330 bash benchmarks/gpu_check.sh all
tail -40 $OUT/gpu_check.log | grep -E "rc=|passed|failed|ms" | tail -24
step kprof timeout 120 python3 benchmarks/gpu_check.py kernels --json $R/kprof.json
step sys0 timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --rollout-workers 12 --json $R/sys0.json
grep -E "env_steps_per_s=" $L | tail -2
finish
