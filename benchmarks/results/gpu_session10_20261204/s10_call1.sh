# Session 10 call 1: the iqn_head kernels rewritten for bandwidth (packs, W_out in registers across rows, loads
# batched). gpu_check.sh all (build, the CUDA tests incl. the new pack-boundary test and size, memcheck, racecheck,
# ops, update, learner), the captured update's kernels by name, the update table of the previous iqn_head.cu
# (.devtools/old_iqn_head.cu, HEAD's) in a copy of the tree for a same-call A/B, and the whole system twice.
L=$OUT/call1.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
OUT=$R/check FOXHUNT_EXT_DIR=/tmp/fhext bash benchmarks/gpu_check.sh all >> $L 2>&1; echo "gpu_check.sh rc=$?" | tee -a $L
grep -E "^=== .* rc=|passed|failed|FAILED" $L | tail -20
step kprof timeout 150 python3 benchmarks/gpu_check.py kernels --json $R/kprof.json
grep -B2 -A14 "iqn_head" $L | grep -iE "iqn|total|kernels" | head -20
mkdir -p /tmp/old && cp -r benchmarks cuda learner lobsim_env actors foxhunt_ray tests pyproject.toml /tmp/old/ && cp .devtools/old_iqn_head.cu /tmp/old/cuda/kernels/iqn_head.cu
( cd /tmp/old && FOXHUNT_EXT_DIR=/tmp/fhext_old PYTHONPATH=/tmp/old:/tmp/site step old_build timeout 200 python3 benchmarks/gpu_check.py build; FOXHUNT_EXT_DIR=/tmp/fhext_old PYTHONPATH=/tmp/old:/tmp/site step old_update timeout 90 python3 benchmarks/gpu_check.py update --reps 200 --json $R/update_old.json )
step new_update timeout 90 python3 benchmarks/gpu_check.py update --reps 200 --json $R/update_new.json
grep -A8 "=== old_update\|=== new_update" $L | tail -30
step sys_new1 timeout 120 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --json $R/sys_new1.json
step sys_new2 timeout 120 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 1 --json $R/sys_new2.json
grep -E "env_steps_per_s=" $L | tail -3
finish
