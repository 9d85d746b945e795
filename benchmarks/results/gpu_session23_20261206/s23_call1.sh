# session 23, call 1: build, the CUDA tests (the learn settings now distil at temperature 0.3); on an H200 (the card
# issue 12 names) also the update timing and the whole system for 40 s; then spike_check's runs
L=$OUT/spike_check.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
step cuda_tests timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_learner_cuda.py tests/test_kernels_cuda.py
grep -E "passed|failed" $L | tail -2
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  step update timeout 90 python3 benchmarks/gpu_check.py update --json $R/update.json
  grep -E "^[0-9]+x[0-9]+ +(highest|high)" $L | tail -4
  step bench timeout 150 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --json $R/bench.json
  grep -E "^env_steps_per_s" $L | tail -1
fi
export SKIP_UPDATE=1
bash .devtools/spike_check.sh
