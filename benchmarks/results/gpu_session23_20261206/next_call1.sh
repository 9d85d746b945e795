# For the next device session (not run yet): the update's kernels at 64 x 128 named by the op and tensor shapes that
# launched them (gpu_check.py regions --shapes, ~10 s, building the extension first), to tell where the float32
# update's last 0.13 ms (1.84x -> 2x the reference ops in the same graph) could come from; then s23_call1.sh (the
# CUDA tests, on an H200 the update timing and the whole system, then spike_check's runs). Copy into .devtools/
# with s14_lib.sh (../gpu_session15_20261205/), s23_call1.sh (this folder) and ../gpu_session21_20261206/spike_check.sh;
# carry .devbundle and .devtools. E.g. EVALS=0 RUNS="E1 1 --set learner.ppo_epochs=2" bash .devtools/next_call1.sh
L=$OUT/spike_check.log; source .devtools/s14_lib.sh
step regions64 timeout 200 python3 benchmarks/gpu_check.py regions --shapes --T 64 --json $R/regions64.json
# the update timing on any card (s23_call1.sh times it only on an H200): be2b1ff against session 22's figures
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 ||
  step update timeout 90 python3 benchmarks/gpu_check.py update --json $R/update.json
bash .devtools/s23_call1.sh
