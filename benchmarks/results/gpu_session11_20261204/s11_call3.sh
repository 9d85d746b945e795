# Session 11 call 3: the learner tests again (test_learner_worker's CPU-only case now pinned to the CPU), the whole
# system at the bare command's own flow control (3 payloads waiting, broadcast every 4) and with 14 rollout actors
# (the learner now waits for payloads), and the lr decay on seed 2 (issue 13 item 3).
L=$OUT/call3.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
step tests timeout 150 env FOXHUNT_REQUIRE_CUDA=1 python3 -m pytest -q -rs -p no:cacheprovider tests/test_learner_cuda.py tests/test_learner.py tests/test_learner_worker.py
grep -E "passed|failed|Error" $L | tail -3
step sysC timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 2 --broadcast-every 4 --max-payloads-waiting 3 --rollout-workers 12 --json $R/sysC.json
step sys14 timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 2 --rollout-workers 14 --json $R/sys14.json
grep -E "env_steps_per_s=|policy lag" $L | tail -4
( cd $OUT && tar -czf r.tgz r )
probe D2 --seed 2 --set learner.lr_decay_to=0.1
finish
