# Session 9 call 3: the captured update's kernels by name (gpu_check.py kernels), then the entropy lever
# (learner.entropy_coef 0.01 -> 0.003) on the main job as written, seeds 0 and 1.
L=$OUT/call3.log; source .devtools/s9_lib.sh
step build timeout 200 python3 benchmarks/gpu_check.py build
step kprof timeout 150 python3 benchmarks/gpu_check.py kernels --json $R/kprof.json
grep -A12 "kernels, " $L | head -60
probe P0 --seed 0 --set learner.entropy_coef=0.003
probe P1 --seed 1 --set learner.entropy_coef=0.003
finish
