# NOT RUN (written in session 17, after its device budget was spent). What the distillation-loss spikes are and
# whether the newest checkpoint's score depends on landing in one (BENCHMARKS.md, "Where the newest checkpoint lands").
# Per seed (about 210 s): the bare command (150 s, 256 held-out episodes, greedy on the newest checkpoint's trained
# weights), every update's diagnostics kept (worker_index, policy lag, approx_kl, clip_frac, the Q losses, q_ens,
# grad norm: which actor's payloads the spikes sit on, and whether the policy ratio or the Q side moves first), then
# the same checkpoint's Polyak target weights and the run's other kept checkpoint (an earlier one) on the same
# episodes. SEEDS (default "0 1") and ARGS (e.g. ARGS="--max-payloads-per-call 3" for calls of at most three payloads,
# so the weights get out between them; ARGS="--set learner.replay_capacity=3145728" for a replay of a whole
# round of payloads, or ARGS="--set rollout.steps_per_sample=32" for half the lag) pick
# the runs; two seeds fit one 600-s call (with the 20-s update timing first). Copy into .devtools/ with s14_lib.sh; run with the device tool (carry
# .devbundle and .devtools), then learning_cycles.py spikes on r/*_updates.tsv.gz.
L=$OUT/spike_check.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
# issue 12 part 3 on whatever card this is (session 17's figures are an H100's; the issue asks for the H200): 20 s
step update timeout 90 python3 benchmarks/gpu_check.py update --json $R/update.json
grep -E "^[0-9]+x[0-9]+ +(highest|high)" $L | tail -4
keep() { python3 - "$1" "$2" <<'PY'
import gzip, json, sys
keys = ("step", "entropy", "l_distill", "policy_lag", "worker_index", "call_payloads", "approx_kl", "clip_frac", "l_pi", "l_c51",
        "l_iqn", "l_dueling", "q_ens_mean", "v_scalar_mean", "adv_mean", "qpa", "grad_norm/total")
with gzip.open(sys.argv[2], "wt") as f:
    f.write("\t".join(k.replace("/", "_") for k in keys) + "\n")
    for line in open(sys.argv[1]):
        r = json.loads(line) if line.strip() else {}
        if "step" in r and "entropy" in r:
            f.write("\t".join(str(r.get(k)) for k in keys) + "\n")
PY
}
for s in ${SEEDS:-0 1}; do
  probe K$s --seed $s ${ARGS:-}
  run=$(ls -d /tmp/runsK$s/*/*/0 | head -1); [ -n "$run" ] || continue
  keep $run/diag.jsonl $R/K${s}_updates.tsv.gz
  step K${s}_target timeout 90 python3 -m foxhunt_ray.evaluate $run --episodes 256 --weights target --out $R/K${s}_target.json
  prev=$(ls $run/checkpoints/ckpt_*.pt | sort | head -1)
  step K${s}_prev timeout 90 python3 -m foxhunt_ray.evaluate $run --episodes 256 --checkpoint $prev --out $R/K${s}_prev.json
  grep -E "oracle fraction|checkpoint ckpt" $L | tail -6
done
finish
