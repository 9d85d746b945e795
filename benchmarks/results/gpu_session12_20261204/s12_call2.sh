# Session 12 call 2: the bare command (the README's GPU-host claim) re-run on the weights-when-ready loop (507afa4)
# and the learner's event waits (8398f7b), seeds 0 and 1; then the system at bench_system's flow control again,
# another seed (call 1's sysA: 3.63M env steps/s, learner_busy 0.941).
L=$OUT/call2.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
probe B0 --seed 0
( cd $OUT && tar -czf r.tgz r )
probe B1 --seed 1
( cd $OUT && tar -czf r.tgz r )
step sysA0 timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --rollout-workers 12 --json $R/sysA0.json
grep -E "env_steps_per_s=|policy lag" $L | tail -2
finish
