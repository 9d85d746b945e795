# Session 7, call 3: setting C (4096 books x 64, mb 256, 3 waiting, broadcast 4) on seeds 1 and 2.
set -uo pipefail
mkdir -p /tmp/site && tar -xJf .devbundle/site.tar.xz -C /tmp/site
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 FOXHUNT_EXT_DIR=/tmp/fhext
R=$OUT/r; mkdir -p $R; L=$OUT/call3.log
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
  step $name timeout 240 python3 -m foxhunt_ray.local --preset phase4_3 --rollout-workers 12 --time-limit-s 150 --out /tmp/runs$name "$@"
  local run=$(ls -d /tmp/runs$name/*/0 | head -1); cp $run/config.json $R/${name}_config.json
  for f in $run/evaluations/*.json; do cp $f $R/${name}_$(basename $f); done
  curve $run > $R/${name}_curve.tsv
  grep -E "^heldout|^\[ +1[45]" $L | tail -2
}
probe C1 --seed 1 --envs-per-worker 4096 --set learner.minibatch_envs=256 --broadcast-every 4 --max-payloads-waiting 3
probe C2 --seed 2 --envs-per-worker 4096 --set learner.minibatch_envs=256 --broadcast-every 4 --max-payloads-waiting 3
cd $OUT && tar -czf r.tgz r && rm -rf r
