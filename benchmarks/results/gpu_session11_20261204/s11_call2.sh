# Session 11 call 2: the learner's diag read no longer waits for the newest payload's steps (pinned copies and an
# event per payload), the minibatch indices from templates, the actions' range checked with one aminmax. The CUDA
# learner tests (the new pipelined-vs-waiting worker test among them), the learner's host path profiled at 1 and
# 3 payloads a call, the whole system twice, and the lr decay on seed 1 (issue 13 item 3).
L=$OUT/call2.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
step tests timeout 150 env FOXHUNT_REQUIRE_CUDA=1 python3 -m pytest -q -rs -p no:cacheprovider tests/test_learner_cuda.py tests/test_learner.py tests/test_learner_worker.py
grep -E "passed|failed|Error" $L | tail -4
step prof timeout 100 python3 benchmarks/profile_learner.py --json $R/profile.json
grep -E "^per_call=" $L | tail -2
( cd $OUT && tar -czf r.tgz r )
step sys1 timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --json $R/sys1.json
step sys2 timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 1 --json $R/sys2.json
grep -E "env_steps_per_s=" $L | tail -2
( cd $OUT && tar -czf r.tgz r )
probe D1 --seed 1 --set learner.lr_decay_to=0.1
finish
