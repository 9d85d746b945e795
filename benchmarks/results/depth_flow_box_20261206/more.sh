cd /work/main
for s in 3 4 5; do
  for arm in d p; do
    extra=""; [ $arm = d ] && extra="--set market.depth_flow_ticks=5"
    timeout 400 .venv/bin/python -m foxhunt_ray.local --seed $s --out /tmp/box/$arm$s $extra > /tmp/box/$arm$s.log 2>&1
    run=$(ls -d /tmp/box/$arm$s/*/*/0)
    OMP_NUM_THREADS=2 timeout 600 .venv/bin/python -m foxhunt_ray.evaluate $run --episodes 256 --out /tmp/box/$arm$s.eval256.json > /tmp/box/$arm$s.eval256.log 2>&1
  done
done
