# Session 6, call 3: issue 13 item 3, exploratory: the main job's command at phase4_3's own defaults on the H200
# (sizing auto -> gpu, settings learn), 12 rollout workers, 400 s of training, then its held-out evaluation.
set -uo pipefail
mkdir -p /tmp/site && tar -xJf .devbundle/site.tar.xz -C /tmp/site
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 FOXHUNT_EXT_DIR=/tmp/fhext
python3 benchmarks/gpu_check.py build > $OUT/build.log 2>&1; echo "build rc=$?"
timeout 560 python3 -m foxhunt_ray.local --preset phase4_3 --rollout-workers 12 --time-limit-s 400 --out /tmp/runs > $OUT/run.log 2>&1
echo "run rc=$?"
run=$(ls -d /tmp/runs/*/0 | head -1); cp $run/config.json $run/diag.jsonl $OUT/ 2>/dev/null; ls $run/evaluations 2>/dev/null && cp $run/evaluations/*.json $OUT/ 2>/dev/null
python3 - <<'PY'
import json
recs=[json.loads(l) for l in open(__import__('os').environ['OUT']+'/diag.jsonl') if l.strip()]
steps=[r for r in recs if 'step' in r and 'qpa_ema' in r]
print(len(steps), 'step records')
for r in steps[:: max(1, len(steps)//12)] + steps[-1:]:
    print({k: round(r[k],3) if isinstance(r.get(k),float) else r.get(k) for k in ('step','time','env_steps','qpa_ema','pnl_cum_usd','l_dueling')})
PY
tail -30 $OUT/run.log
