cd /tmp/wt_ab
export PYTHONPATH=/tmp/wt_ab
for s in $SEEDS; do
  for arm in p c; do
    extra=""; [ $arm = p ] && extra="--set learner.obs_norm=probe"
    timeout 400 /work/main/.venv/bin/python -m foxhunt_ray.local --seed $s --out /tmp/box20/$arm$s $extra > /tmp/box20/$arm$s.log 2>&1
    run=$(ls -d /tmp/box20/$arm$s/*/*/0)
    OMP_NUM_THREADS=2 timeout 600 /work/main/.venv/bin/python -m foxhunt_ray.evaluate $run --episodes 256 --out /tmp/box20/$arm$s.eval256.json > /tmp/box20/$arm$s.eval256.log 2>&1
    echo "$arm$s done $(date -u +%T) $(grep -h 'oracle fraction' /tmp/box20/$arm$s.eval256.log)" >> /tmp/box20/progress
  done
done
