# NOT RUN: planned for session 13, but no device machine could be started for it (about fourteen failed starts between 12:47 and 14:47 UTC); kept for the next session.
# Session 13 call 2 (an H100: no H200 could be started this session): the bare command with 5-step Q targets (--set learner.n_step=5; the box screen
# learning_sweep_20261205/run_nstep.sh put 5 ahead of 3 on every seed, 8 on two of three), seeds 0 and 1, 150 s of training, 256 held-out
# episodes: against session 12's B0/B1 (0.747/0.715, the same command without the --set).
L=$OUT/call2.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
probe N0 --seed 0 --set learner.n_step=5
( cd $OUT && tar -czf r.tgz r )
probe N1 --seed 1 --set learner.n_step=5
finish
