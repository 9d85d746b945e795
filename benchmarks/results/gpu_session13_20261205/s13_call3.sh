# NOT RUN: planned for session 13, but no device machine could be started for it (about fourteen failed starts between 12:47 and 14:47 UTC); kept for the next session.
# Session 13 call 3 (the H100 of call 2, kept warm): the third seed of the 5-step probe (call 2: N0, N1), then the
# bare command (n_step 3, the default) on seed 0 on this same card, the baseline these runs compare against (the
# earlier bare-command runs were all on the H200).
L=$OUT/call3.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
probe N2 --seed 2 --set learner.n_step=5
( cd $OUT && tar -czf r.tgz r )
probe B0 --seed 0
finish
