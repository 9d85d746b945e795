# NOT RUN: written in session 16 (no device was lent). After next_launch_trim_check.sh (in the branch
# guarded-adam-kernel), on whichever tree lands: learning is unchanged by the launch trims (and the guard as one op),
# and how the GPU host's plateau policy follows the regime, split by the new regime's length (issue 13, item 3:
# BENCHMARKS.md "How late the flow tells a regime change"; the box agents miss 45-52 % of the 50-100-step regimes
# that the best filter on the book misses 16-19 % of). The bare command on seeds 0 and 1 (150 s, 256 held-out
# episodes each), then benchmarks/detection_limit.py --agent on seed 1's newest checkpoint. Copy into .devtools/
# with s14_lib.sh and run with the device tool (carry .devbundle and .devtools). About 8.5 minutes; seed 2 in a
# second call (drop the lag step and B0).
L=$OUT/call2.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
probe B0 --seed 0
probe B1 --seed 1
run=$(ls -d /tmp/runsB1/*/*/0 | head -1)
step lag timeout 150 python3 benchmarks/detection_limit.py --agent $run --json $R/B1_detection_limit.json
tail -12 $L
finish
