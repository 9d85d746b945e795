# Session 23 added one switch, default off: EVALS=0 skips the target-weights and greedy-on-q evaluations of each run
# (~27 s a run), so that three runs fit one 600-s call (gpu_session23_20261206/README.md).
# Session 21's copy of session 18's device script (below), the one change: keep() writes the per-update floats at 4
# significant digits (round_updates.rounded, imported from this folder), so a run's file is about 0.75 MB and a
# session's results stay small enough for the working tree and the device bundle to fit the 64 MiB the device takes
# (slim_bundle.sh).
# Session 18's device script (calls 1-2; BENCHMARKS.md, "Half the books a rollout actor"), grown from session 17's
# next_spike_check.sh. The H100/H200 update timing (gpu_check.py update; SKIP_UPDATE=1 skips it), then per run: the
# bare command (150 s, 256 held-out episodes, greedy on the newest checkpoint), every update's diagnostics kept
# (r/NAME_updates.tsv.gz: entropy, l_distill, policy lag, worker_index, call_payloads, approx_kl, the Q losses,
# q_ens), and the same checkpoint played with its Polyak target weights and greedily on q_ens. RUNS picks the runs:
# "NAME SEED FLAGS...;NAME SEED FLAGS..." (call 1: RUNS="K0 0 --set rollout.num_envs=2048;K1 1 --set
# rollout.num_envs=2048"; call 2: SKIP_UPDATE=1 RUNS="K2 2 --set rollout.num_envs=2048;B0 0"; without RUNS, K<seed>
# for each of SEEDS with ARGS). Two runs fit one 600-s call. Copy into .devtools/ with s14_lib.sh
# (gpu_session15_20261205/) and run with the device tool (carry .devbundle and .devtools); then
# gpu_session17_20261205/learning_cycles.py spikes r/*_updates.tsv.gz.
L=$OUT/spike_check.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
# issue 12 part 3 on whatever card this is (session 17's figures are an H100's; the issue asks for the H200): 20 s
[ -n "${SKIP_UPDATE:-}" ] || step update timeout 90 python3 benchmarks/gpu_check.py update --json $R/update.json
grep -E "^[0-9]+x[0-9]+ +(highest|high)" $L | tail -4
# BENCH (added after session 18, for the next): flags of one bench_system.py --gpu run before the learning runs, e.g.
# BENCH="--seconds 40 --envs-per-worker 2048 --max-payloads-waiting 3 --broadcast-every 4" (the main job's
# gpu_host settings since session 18; learner_busy there is not yet measured)
[ -z "${BENCH:-}" ] || step bench timeout 150 python3 benchmarks/bench_system.py --gpu $BENCH --json $R/bench.json
keep() { python3 - "$1" "$2" <<'PY'
import gzip, json, sys
keys = ("step", "entropy", "l_distill", "policy_lag", "worker_index", "call_payloads", "approx_kl", "clip_frac", "l_pi", "l_c51",
        "l_iqn", "l_dueling", "q_ens_mean", "v_scalar_mean", "adv_mean", "qpa", "grad_norm/total")
sys.path.insert(0, "benchmarks/results/gpu_session21_20261206")  # the script runs from the repository root
from round_updates import rounded  # 4 significant digits, integers as integers: a run's file ~0.75 MB, not 2.6 MB
with gzip.open(sys.argv[2], "wt", compresslevel=9) as f:
    f.write("\t".join(k.replace("/", "_") for k in keys) + "\n")
    for line in open(sys.argv[1]):
        r = json.loads(line) if line.strip() else {}
        if "step" in r and "entropy" in r:
            f.write("\t".join(rounded(str(r.get(k))) for k in keys) + "\n")
PY
}
# RUNS: "NAME SEED ARGS...;NAME SEED ARGS..." (default: K<seed> for each of SEEDS with ARGS)
if [ -z "${RUNS:-}" ]; then RUNS=""; for s in ${SEEDS:-0 1}; do RUNS="$RUNS;K$s $s ${ARGS:-}"; done; fi
IFS=';' read -ra SPECS <<< "$RUNS"
for spec in "${SPECS[@]}"; do
  [ -n "${spec// }" ] || continue
  read -r n s rest <<< "$spec"
  probe $n --seed $s $rest
  run=$(ls -d /tmp/runs$n/*/*/0 | head -1); [ -n "$run" ] || continue
  keep $run/diag.jsonl $R/${n}_updates.tsv.gz
  # EVALS=0 (session 23) skips the two extra evaluations below (~27 s a run) to fit more runs in the device time
  [ "${EVALS:-1}" != 0 ] && [ $SECONDS -lt 530 ] && step ${n}_target timeout 30 python3 -m foxhunt_ray.evaluate $run --episodes 256 --weights target --out $R/${n}_target.json
  [ "${EVALS:-1}" != 0 ] && [ $SECONDS -lt 555 ] && step ${n}_q timeout 30 python3 -m foxhunt_ray.evaluate $run --episodes 256 --policy q --out $R/${n}_q.json
  grep -E "oracle fraction|checkpoint ckpt" $L | tail -6
  [ $SECONDS -lt ${LAST_START:-350} ] || break
done
finish
