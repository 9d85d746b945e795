# Session 14 call 2: two probes of the plateau (call 1: the greedy policy reaches ~0.75 of the oracle by update
# 4,000 and stays there to update 43,000, while the sampled policy stays near uniform). A: a sharper behaviour
# policy (entropy bonus 0.001, distillation temperature 0.1); B: 1-step Q targets (no near-random actions inside
# the targets). Seed 0, the bare command's protocol (150 s, 256 held-out episodes).
L=$OUT/call2.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
probe A0 --seed 0 --set learner.entropy_coef=0.001 --set learner.distill_temperature=0.1
( cd $OUT && tar -czf r.tgz r )
probe N0 --seed 0 --set learner.n_step=1
finish
