#!/bin/bash
# box screen of learner.ppo_epochs=2 at the learn default (temperature 0.3) against box_t03 (the same command without it)
cd /work/main
for s in 0 1 2; do
  uptime > /tmp/box22/ep2_s$s.log
  .venv/bin/python -m foxhunt_ray.local --seed $s --eval-episodes 256 --out /tmp/box22/runs_ep2_s$s --set learner.ppo_epochs=2 >> /tmp/box22/ep2_s$s.log 2>&1
  echo rc=$? >> /tmp/box22/ep2_s$s.log; uptime >> /tmp/box22/ep2_s$s.log
done
