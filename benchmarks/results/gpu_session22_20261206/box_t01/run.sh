#!/bin/bash
# box screen of learner.distill_temperature=0.1 against rllib_box_20261206's foxhunt_s0-2 (the same command without --set)
cd /work/main
for s in 0 1 2; do
  uptime > /tmp/box22/t01_s$s.log
  .venv/bin/python -m foxhunt_ray.local --seed $s --eval-episodes 256 --out /tmp/box22/runs01_s$s --set learner.distill_temperature=0.1 >> /tmp/box22/t01_s$s.log 2>&1
  echo rc=$? >> /tmp/box22/t01_s$s.log; uptime >> /tmp/box22/t01_s$s.log
done
