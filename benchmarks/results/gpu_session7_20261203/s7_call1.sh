# Session 7, call 1: everything since the last GPU run, checked on the H200; then a learning probe at the
# throughput settings (issue 13 item 3).
set -uo pipefail
mkdir -p /tmp/site && tar -xJf .devbundle/site.tar.xz -C /tmp/site
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 FOXHUNT_EXT_DIR=/tmp/fhext
R=$OUT/r; mkdir -p $R; L=$OUT/call1.log
step() { local name=$1; shift; local t0=$SECONDS; echo "=== $name: $*" >> $L; "$@" >> $L 2>&1; local rc=$?; echo "=== $name rc=$rc $((SECONDS-t0)) s" | tee -a $L; }
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
# build, pytest kernel checks (FOXHUNT_REQUIRE_CUDA=1), memcheck, racecheck, ops
step kernels env OUT=$R/kernels timeout 200 bash benchmarks/gpu_check.sh kernels
tail -40 $R/kernels/gpu_check.log | grep -E "passed|failed|ERROR SUMMARY|RACECHECK SUMMARY|rc=" | tail -12
step minibatch timeout 60 python3 benchmarks/gpu_check.py minibatch --T 16 --B 512
grep -E "minibatch" $L | tail -2
step update timeout 90 python3 benchmarks/gpu_check.py update --reps 200 --json $R/update.json
grep -B2 -A12 "speed" $L | tail -14
step sys_s0 timeout 120 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --json $R/sys_s0.json
tail -4 $L
# learning probe: the system's throughput settings under the main job's command
step learnA timeout 300 python3 -m foxhunt_ray.local --preset phase4_3 --rollout-workers 12 --envs-per-worker 4096 \
  --set learner.minibatch_envs=256 --broadcast-every 16 --max-payloads-waiting 12 --time-limit-s 150 --out /tmp/runsA
run=$(ls -d /tmp/runsA/*/0 | head -1); cp $run/config.json $R/learnA_config.json; cp $run/evaluations/*.json $R/ 2>/dev/null
python3 - "$run/diag.jsonl" > $R/learnA_curve.tsv <<'PY'
import json, sys
recs=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps=[r for r in recs if 'step' in r and 'qpa_ema' in r]
print('step\tseconds\tenv_steps\tqpa_ema\tpnl_cum_usd\tl_dueling\tpolicy_lag')
t0=steps[0].get('time',0)
for r in steps[::max(1,len(steps)//60)]+steps[-1:]:
    print('\t'.join(str(round(r.get(k),4)) if isinstance(r.get(k),float) else str(r.get(k)) for k in ('step','time','env_steps','qpa_ema','pnl_cum_usd','l_dueling','policy_lag')))
PY
tail -30 $L | grep -vE "^\[ " ; grep -E "^\[" $L | tail -4
cd $OUT && tar -czf r.tgz r && rm -rf r
