# Session 9 call 1: the main job as written (bare command, gpu_host defaults now with lr 1e-3) on seeds 1 and 2.
L=$OUT/call1.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 200 python3 benchmarks/gpu_check.py build
probe H1 --seed 1
probe H2 --seed 2
finish
