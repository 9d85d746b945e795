# Session 15 call 1 (the working tree = main + policy_losses_kernel.patch, uncommitted): the fused on-policy losses
# on the GPU (gpu_check.sh all: build, kernel checks vs float64 reference, opcheck, learner CUDA tests,
# compute-sanitizer memcheck + racecheck, op timings, part-3 update table), the kernel profile, the whole system
# once, then the bare main job on seed 0 (150 s + 256 held-out episodes; learning with the new kernel) with its
# newest checkpoint brought back for detection_limit.py --agent (run here if time is left, else on the box).
L=$OUT/call1.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step gpu_check_all env OUT=$R timeout 300 bash benchmarks/gpu_check.sh all
grep -E "rc=|passed|failed" $R/gpu_check.log | tail -14
step kprof timeout 90 python3 benchmarks/gpu_check.py kernels --json $R/kprof.json
step sys0 timeout 100 python3 benchmarks/bench_system.py --gpu --seconds 30 --seed 0 --rollout-workers 12 --json $R/sys0.json
grep -E "env_steps_per_s=" $L | tail -2
probe B0 --seed 0
run=$(ls -d /tmp/runsB0/*/*/0 | head -1)
if [ -n "$run" ]; then
  mkdir -p $R/B0_run/checkpoints && cp $run/config.json $R/B0_run/
  ck=$(ls $run/checkpoints/ckpt_*.pt | sort -V | tail -1); cp $ck $R/B0_run/checkpoints/; ls -la $R/B0_run/checkpoints >> $L
  left=$((575 - SECONDS)); echo "seconds left for lag: $left" >> $L
  [ $left -gt 120 ] && step lag timeout $left python3 benchmarks/detection_limit.py --agent $run --json $R/B0_detection_limit.json
fi
finish
