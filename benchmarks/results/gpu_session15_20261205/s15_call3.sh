# Session 15 call 3 (written in session 14 as next_agent_lag.sh; seed 1 here, the kernel tree of calls 1-2).
# The bare command on seed 0 (150 s, 256 held-out episodes), then benchmarks/detection_limit.py --agent on its
# newest checkpoint: how late the GPU host's plateau policy follows the regime, beside the oracles told 20 and 30
# steps late (BENCHMARKS.md, "How late the flow tells a regime change"). Copy into .devtools/ and run with the device
# tool (carry .devbundle and .devtools). About 4.5 minutes.
L=$OUT/call3.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
probe B1 --seed 1
run=$(ls -d /tmp/runsB1/*/*/0 | head -1)
step lag timeout 150 python3 benchmarks/detection_limit.py --agent $run --json $R/B1_detection_limit.json
tail -9 $L
finish
