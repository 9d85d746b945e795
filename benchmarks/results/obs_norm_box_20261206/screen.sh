cd /tmp/wt_norm
export PYTHONPATH=/tmp/wt_norm
for s in $SEEDS; do
  arm=n
  timeout 400 /work/main/.venv/bin/python -m foxhunt_ray.local --seed $s --out /tmp/box20/$arm$s > /tmp/box20/$arm$s.log 2>&1
  run=$(ls -d /tmp/box20/$arm$s/*/*/0)
  OMP_NUM_THREADS=2 timeout 600 /work/main/.venv/bin/python -m foxhunt_ray.evaluate $run --episodes 256 --out /tmp/box20/$arm$s.eval256.json > /tmp/box20/$arm$s.eval256.log 2>&1
  echo "seed $s done $(date -u +%T)" >> /tmp/box20/progress
done
