# Session 17 call 3: the bare command with the books' first episodes staggered (rollout.stagger_episodes, on by
# default from this change), seeds 0-2, 150 s of training and 128 held-out episodes each (256 would not fit three
# seeds in one 600-s call); per-update entropy, distillation loss and advantage mean kept (every update) to see
# whether they still cycle with the episode. Copy into .devtools/ with s14_lib.sh; run with the device tool (carry
# .devbundle and .devtools).
L=$OUT/call3.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
keep() { python3 - "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
keys = ("step", "entropy", "l_distill", "adv_mean", "v_scalar_mean", "policy_lag")
with open(sys.argv[2], "w") as f:
    f.write("\t".join(keys) + "\n")
    for r in rows:
        if "step" in r and "entropy" in r:
            f.write("\t".join(str(r.get(k)) for k in keys) + "\n")
PY
}
for s in ${SEEDS:-0 1 2}; do
  probe S$s --seed $s --eval-episodes ${EPISODES:-128}
  run=$(ls -d /tmp/runsS$s/*/*/0 | head -1); [ -n "$run" ] && keep $run/diag.jsonl $R/S${s}_updates.tsv
done
finish
