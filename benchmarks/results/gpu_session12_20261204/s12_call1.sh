# Session 12 call 1: build + learner tests on the newest code (e442be0: 3dfe7df/403d969/507afa4), the whole system with
# the weights-when-ready loop (507afa4) at bench_system's flow control and at the bare command's, then the bare command
# with the replay ratio raised (q_batch_size 4096: each transition sampled ~0.25 times, as on the box), seed 0.
L=$OUT/call1.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
step tests timeout 150 env FOXHUNT_REQUIRE_CUDA=1 python3 -m pytest -q -rs -p no:cacheprovider tests/test_learner_cuda.py tests/test_learner.py tests/test_learner_worker.py
grep -E "passed|failed|Error" $L | tail -3
step prof4096 timeout 90 python3 benchmarks/profile_learner.py --per-call 3 --calls 30 --set learner.q_batch_size=4096 --json $R/prof4096.json
step prof1024 timeout 90 python3 benchmarks/profile_learner.py --per-call 3 --calls 30 --json $R/prof1024.json
step sysA timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 2 --rollout-workers 12 --json $R/sysA.json
step sysC timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 2 --broadcast-every 4 --max-payloads-waiting 3 --rollout-workers 12 --json $R/sysC.json
grep -E "env_steps_per_s=|policy lag|^per_call=" $L | tail -6
( cd $OUT && tar -czf r.tgz r )
probe Q0 --seed 0 --set learner.q_batch_size=4096
finish
