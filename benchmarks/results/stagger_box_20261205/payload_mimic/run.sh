#!/bin/bash
# the GPU host's payload structure on the box: 4 actors x 1,024 books x 16 steps, 16 learner steps a payload
# (minibatch 64 books), the replay one payload (16,384) against sixteen (262,144, the default)
cd /work/main && source .venv/bin/activate
for cap in 16384 262144; do
  python -m foxhunt_ray.local --seed 0 --rollout-workers 4 --envs-per-worker 1024 --time-limit-s 240 --eval-episodes 64 \
    --set learner.minibatch_envs=64 --set learner.replay_capacity=$cap --out /tmp/mimic/cap$cap > /tmp/mimic/cap$cap.txt 2>&1
  echo "cap $cap $(grep fraction_of_oracle /tmp/mimic/cap$cap.txt)" >> /tmp/mimic/summary.txt
done
echo done >> /tmp/mimic/summary.txt
