# Session 10 call 2: call 1 found the learner's iqn_head on the one-element path (W_out is a view into the flat
# parameter buffer, on no 16-byte boundary) and at 9 actions (gpu_check's shapes, not the market's 7). Now: W_out
# staged in shared memory by the forward and read element-wise by the backward; gpu_check at the market's shapes.
# gpu_check.sh kernels (build, CUDA tests, memcheck, racecheck, ops), the kernels by name and the update table for
# HEAD's iqn_head.cu and this one in one call, then the whole system once if the checks passed.
L=$OUT/call2.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
OUT=$R/check FOXHUNT_EXT_DIR=/tmp/fhext bash benchmarks/gpu_check.sh kernels >> $L 2>&1; rc=$?; echo "gpu_check.sh kernels rc=$rc" | tee -a $L
grep -E "^=== .* rc=|passed|failed|FAILED|Error|assert" $L | head -30
mkdir -p /tmp/old && cp -r benchmarks cuda learner lobsim_env actors foxhunt_ray tests pyproject.toml /tmp/old/ && cp .devtools/old_iqn_head.cu /tmp/old/cuda/kernels/iqn_head.cu
( cd /tmp/old && export FOXHUNT_EXT_DIR=/tmp/fhext_old PYTHONPATH=/tmp/old:/tmp/site
  step old_build timeout 200 python3 benchmarks/gpu_check.py build
  step old_kprof timeout 150 python3 benchmarks/gpu_check.py kernels --json $R/kprof_old.json
  step old_update timeout 90 python3 benchmarks/gpu_check.py update --reps 200 --json $R/update_old.json )
step new_kprof timeout 150 python3 benchmarks/gpu_check.py kernels --json $R/kprof_new.json
step new_update timeout 90 python3 benchmarks/gpu_check.py update --reps 200 --json $R/update_new.json
grep -E "iqn_head|\"graph_ms\"" $L | cut -c1-200 | head -40
[ $rc -eq 0 ] && step sys_new1 timeout 120 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --json $R/sys_new1.json
grep -E "env_steps_per_s=" $L | tail -2
finish
