# Session 10 call 3: issue 13 item 3, the averaged-policy lever. The bare command (150 s of training, 256 held-out
# episodes) on seeds 0 and 1 with this session's iqn_head kernels, then each run's newest checkpoint evaluated
# again with --weights target (the Polyak-averaged target network) on the same 256 episodes.
L=$OUT/call3.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
for s in 0 1; do
  probe T$s --seed $s
  run=$(ls -d /tmp/runsT$s/*/*/0 2>/dev/null | head -1)
  step T${s}_target timeout 120 python3 -m foxhunt_ray.evaluate $run --episodes 256 --weights target --quiet --out $R/T${s}_target.json
  grep -E "^ *(agent|oracle|imbalance) " $L | tail -3
done
finish
