# Session 7, call 4: setting C on seed 1 for 300 s (after 150 s it gave 0.834).
set -uo pipefail
mkdir -p /tmp/site && tar -xJf .devbundle/site.tar.xz -C /tmp/site
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 FOXHUNT_EXT_DIR=/tmp/fhext
R=$OUT/r; mkdir -p $R; L=$OUT/call4.log
step() { local name=$1; shift; local t0=$SECONDS; echo "=== $name: $*" >> $L; "$@" >> $L 2>&1; local rc=$?; echo "=== $name rc=$rc $((SECONDS-t0)) s" | tee -a $L; }
python3 benchmarks/gpu_check.py build > /dev/null 2>&1
curve() { python3 - "$1/diag.jsonl" <<'PY'
import json, sys
recs=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps=[r for r in recs if 'step' in r and 'qpa_ema' in r]
print('step\tseconds\tenv_steps\tqpa_ema\tpnl_cum_usd\tl_dueling\tpolicy_lag')
for r in steps[::max(1,len(steps)//60)]+steps[-1:]:
    print('\t'.join(str(round(r.get(k),4)) if isinstance(r.get(k),float) else str(r.get(k)) for k in ('step','time','env_steps','qpa_ema','pnl_cum_usd','l_dueling','policy_lag')))
PY
}
probe() { local name=$1; shift
  step $name timeout 380 python3 -m foxhunt_ray.local --preset phase4_3 --rollout-workers 12 --time-limit-s 150 --out /tmp/runs$name "$@"
  local run=$(ls -d /tmp/runs$name/*/0 | head -1); cp $run/config.json $R/${name}_config.json
  for f in $run/evaluations/*.json; do cp $f $R/${name}_$(basename $f); done
  curve $run > $R/${name}_curve.tsv
  grep -E "^heldout|^\[ +1[45]" $L | tail -2
}
probe L1 --seed 1 --time-limit-s 300 --envs-per-worker 4096 --set learner.minibatch_envs=256 --broadcast-every 4 --max-payloads-waiting 3
cd $OUT && tar -czf r.tgz r && rm -rf r
