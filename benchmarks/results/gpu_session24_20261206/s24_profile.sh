# session 24: the lean profile call (an H100 when no H200 comes): build, the update timing, the device time by kernel,
# and the update's kernels at 64 x 128 and 8 x 128 named by launching op and shapes (gpu_check.py regions --shapes).
L=$OUT/spike_check.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 150 python3 benchmarks/gpu_check.py build
step update timeout 90 python3 benchmarks/gpu_check.py update --json $R/update.json
grep -E "^[0-9]+x[0-9]+ +(highest|high)" $L | tail -4
step kprof timeout 60 python3 benchmarks/gpu_check.py kernels --json $R/kernels.json
step regions64 timeout 90 python3 benchmarks/gpu_check.py regions --shapes --T 64 --json $R/regions64.json
step regions8 timeout 90 python3 benchmarks/gpu_check.py regions --shapes --T 8 --json $R/regions8.json
finish
