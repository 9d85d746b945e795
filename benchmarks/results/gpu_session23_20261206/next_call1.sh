# For the next device session (not run yet): s23_call1.sh plus the update's kernels at 64 x 128 named by the op and
# tensor shapes that launched them (gpu_check.py regions --shapes, ~10 s), to tell where the float32 update's last
# 0.13 ms (1.84x -> 2x the reference ops in the same graph) could come from. Copy into .devtools/ with s14_lib.sh and
# spike_check.sh (this folder's); carry .devbundle and .devtools. E.g.
# EVALS=0 RUNS="E1 1 --set learner.ppo_epochs=2" bash .devtools/next_call1.sh
L=$OUT/spike_check.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
step cuda_tests timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_learner_cuda.py tests/test_kernels_cuda.py
grep -E "passed|failed" $L | tail -2
step regions64 timeout 90 python3 benchmarks/gpu_check.py regions --shapes --T 64 --json $R/regions64.json
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  step update timeout 90 python3 benchmarks/gpu_check.py update --json $R/update.json
  grep -E "^[0-9]+x[0-9]+ +(highest|high)" $L | tail -4
  step bench timeout 150 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --json $R/bench.json
  grep -E "^env_steps_per_s" $L | tail -1
fi
export SKIP_UPDATE=1
bash .devtools/spike_check.sh
