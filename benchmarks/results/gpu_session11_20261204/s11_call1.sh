# Session 11 call 1: gpu_check.sh all (the lr-decay graph case of test_learner_cuda.py runs on a GPU for the first
# time), the learner's host path profiled without Ray (benchmarks/profile_learner.py), the bare command with the
# lr decay on seed 0 (issue 13 item 3), and the whole system once with the watchdog loop (bench_system --gpu).
L=$OUT/call1.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
OUT=$R/check FOXHUNT_EXT_DIR=/tmp/fhext timeout 260 bash benchmarks/gpu_check.sh all >> $L 2>&1; echo "gpu_check.sh rc=$?" | tee -a $L
grep -E "^=== .* rc=|passed|failed|FAILED" $L | tail -12
step prof timeout 100 python3 benchmarks/profile_learner.py --json $R/profile.json
grep -E "updates_per_s=|learner_busy\"|launch_ms|stage_ms|sync_ms|weights_ms" $L | tail -8
( cd $OUT && tar -czf r.tgz r )
probe D0 --seed 0 --set learner.lr_decay_to=0.1
( cd $OUT && tar -czf r.tgz r )
step sys1 timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --json $R/sys1.json
grep -E "env_steps_per_s=" $L | tail -2
finish
