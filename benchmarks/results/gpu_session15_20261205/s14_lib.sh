# sourced by the session-9 and 14 device scripts
set -uo pipefail
mkdir -p /tmp/site && [ -e /tmp/site/ray ] || tar -xJf .devbundle/site.tar.xz -C /tmp/site
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 FOXHUNT_EXT_DIR=/tmp/fhext
R=$OUT/r; mkdir -p $R
step() { local name=$1; shift; local t0=$SECONDS; echo "=== $name: $*" >> $L; "$@" >> $L 2>&1; local rc=$?; echo "=== $name rc=$rc $((SECONDS-t0)) s" | tee -a $L; }
curve() { python3 - "$1/diag.jsonl" <<'PY'
import json, sys
recs=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps=[r for r in recs if 'step' in r and 'qpa_ema' in r]
print('step\tseconds\tenv_steps\tqpa_ema\tpnl_cum_usd\tl_dueling\tpolicy_lag\tentropy\tapprox_kl\tl_distill')
for r in steps[::max(1,len(steps)//60)]+steps[-1:]:
    print('\t'.join(str(round(r.get(k),4)) if isinstance(r.get(k),float) else str(r.get(k)) for k in ('step','time','env_steps','qpa_ema','pnl_cum_usd','l_dueling','policy_lag','entropy','approx_kl','l_distill')))
PY
}
# probe NAME [flags...]: the main job as a user runs it, 150 s of training, 256 held-out episodes
probe() { local name=$1; shift
  step $name timeout 270 python3 -m foxhunt_ray.local --time-limit-s 150 --eval-episodes 256 --out /tmp/runs$name "$@"
  local run=$(ls -d /tmp/runs$name/*/*/0 2>/dev/null | head -1)
  [ -n "$run" ] || { echo "no run folder for $name"; return; }
  cp $run/config.json $R/${name}_config.json; cp $run/summary.json $R/${name}_summary.json 2>/dev/null
  for f in $run/evaluations/*.json; do cp $f $R/${name}_$(basename $f); done
  curve $run > $R/${name}_curve.tsv
  grep -E "heldout_pnl_usd|^ *(agent|oracle|imbalance|flat|random) " $L | tail -6
}
# finish: r/ as r.tgz; a file over 12 MB (a checkpoint: 79 MB in session 15, which lost that call's r.tgz) is left
# out and named in the log, so the rest still comes back
finish() { find $R -type f -size +12M -printf '%p (%s bytes) left out of r.tgz\n' -delete >> $L; cp $L $R/; cd $OUT && tar -czf r.tgz r && rm -rf r; }
