# Session 13, the one device call the budget had left after about fourteen failed starts: the bare command with 5-step
# Q targets (--set learner.n_step=5) on seed 0, 150 s of training, 256 held-out episodes, against session 12's B0
# (0.747, the same command without the --set, H200).
L=$OUT/call2b.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
probe N0 --seed 0 --set learner.n_step=5
finish
