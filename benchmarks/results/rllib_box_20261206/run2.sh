cd /work/main
while [ ! -e /tmp/rlb/finished ]; do sleep 5; done
for s in 0 1 2; do
  .venv/bin/python -m foxhunt_ray.local --seed $s --eval-episodes 256 --out /tmp/fhb/s$s > /tmp/fhb/s$s.log 2>&1
done
for s in 3 4; do
  /tmp/rl/bin/python benchmarks/bench_rllib.py --seconds 240 --seed $s --fragment 64 --epochs 4 --minibatch 512 --json /tmp/rlb/B$s.json > /tmp/rlb/B$s.log 2>&1
done
echo done > /tmp/rlb/finished2
