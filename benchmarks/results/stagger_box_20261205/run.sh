#!/bin/bash
# box A/B of rollout.stagger_episodes: the bare main job (phase4_3, sizing cpu, 240 s), then 256 held-out episodes
cd /work/main && source .venv/bin/activate
for S in 0 1 2; do
  for arm in on off; do
    flag=""; [ $arm = off ] && flag="--set rollout.stagger_episodes=false"
    out=/tmp/stag/$arm/seed$S
    python -m foxhunt_ray.local --seed $S --out $out $flag > /tmp/stag/${arm}_s$S.txt 2>&1
    run=$(ls -d $out/*/*/0 | head -1)
    python -m foxhunt_ray.evaluate $run --episodes 256 > /tmp/stag/${arm}_s${S}_eval256.txt 2>&1
    echo "$arm $S $(grep fraction_of_oracle /tmp/stag/${arm}_s$S.txt) $(grep -i 'oracle fraction' /tmp/stag/${arm}_s${S}_eval256.txt)" >> /tmp/stag/summary.txt
  done
done
echo done >> /tmp/stag/summary.txt
