# NOT RUN: written in session 16 (no device was lent). After next_launch_trim_check.sh (in the branch
# guarded-adam-kernel), on whichever tree lands: learning is unchanged by the launch trims (and the guard as one op),
# and how the GPU host's plateau policy follows the regime (issue 13, item 3; BENCHMARKS.md "How late the flow tells
# a regime change": the box agents are flat on 1-2 % of steps, hold the wrong full position through every regime they
# miss, never start the move there, and miss the regimes where the flow's evidence stays near 0.4).
# Call A (this script, about 6.5 minutes): the bare command on seed 1 (150 s, 256 held-out episodes), then on its
# newest checkpoint detection_limit.py --agent (the never-followed split, where the position sits), the shadow
# filter probe and the commitment probe. Call B: `SEEDS="0 2" bash .devtools/next_learning_check.sh` runs the bare
# command on seeds 0 and 2 only (about 7 minutes). Copy into .devtools/ with s14_lib.sh and run with the device tool
# (carry .devbundle and .devtools).
L=$OUT/call_learning.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
if [ -n "${SEEDS:-}" ]; then
  for s in $SEEDS; do probe B$s --seed $s; done
else
  probe B1 --seed 1
  run=$(ls -d /tmp/runsB1/*/*/0 | head -1)
  step lag timeout 150 python3 benchmarks/detection_limit.py --agent $run --json $R/B1_detection_limit.json
  P=benchmarks/results/detection_limit_20261205c
  step shadow timeout 120 python3 $P/shadow_filter_probe.py $run
  step commit timeout 120 python3 $P/commit_probe.py $run
  grep -A3 "shadow flow filter\|greedy pi\|commit to" $L | tail -12
fi
finish
