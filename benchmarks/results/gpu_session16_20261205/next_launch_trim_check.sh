# NOT RUN: written in session 16 (no device was lent that session) for the branch guarded-adam-kernel, which is main
# (with session 16's launch trims: one encoder pass, one concatenation per flat gradient, the main loss as one dot
# product, the IQN constants made once; CPU census 344 -> 267 launches at 8 x 128) plus the device guard as one op
# (ops.guarded_adam_, cuda/kernels/guarded_adam.cu; census 267 -> about 159) plus the dueling forward in one pass
# (cuda/kernels/dueling.cu, N <= 16; 4 calls an update, 33.6 us a replay in session 15). Three trees, one machine:
#   old  = a3ba056 (session 15's HEAD: 333 kernels, 1.526 ms a replay at 8 x 128 on session 15's H200)
#   main = main's tree (the launch trims alone: same .cu files as old, so it reuses old's extension build)
#   new  = this branch, checked out (the working tree the device tool copies)
# Before the call, from /work/main with the branch checked out:
#   git archive a3ba056 cuda learner lobsim_env actors foxhunt_ray pyproject.toml tests \
#     $(git ls-files 'benchmarks/*.py' 'benchmarks/*.sh') | gzip > .devtools/old_tree.tgz
#   git archive main cuda learner lobsim_env actors foxhunt_ray pyproject.toml tests \
#     $(git ls-files 'benchmarks/*.py' 'benchmarks/*.sh') | gzip > .devtools/main_tree.tgz
#   cp benchmarks/results/gpu_session15_20261205/s14_lib.sh benchmarks/results/gpu_session16_20261205/*.sh .devtools/
# then run `bash .devtools/next_launch_trim_check.sh` with the device tool (carry .devbundle and .devtools). About
# 8.5 minutes: the new tree's kernel checks (every op against the float64 reference with guarded_adam_'s rows,
# opcheck, the learner's CUDA tests incl. the fused-against-composed guard, compute-sanitizer memcheck and
# racecheck), the part-3 update table, kernel profile and regions for new; update and kernel profile for old and
# main; the whole system once each for new and old.
L=$OUT/call1.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step kernels env OUT=$R timeout 240 bash benchmarks/gpu_check.sh kernels
grep -E "rc=|passed|failed" $R/gpu_check.log | tail -10
step update timeout 90 python3 benchmarks/gpu_check.py update --json $R/update.json
step kprof timeout 90 python3 benchmarks/gpu_check.py kernels --json $R/kprof.json
step regions timeout 120 python3 benchmarks/gpu_check.py regions --json $R/regions.json
for tree in old main; do
  mkdir -p /tmp/$tree && tar -xzf .devtools/${tree}_tree.tgz -C /tmp/$tree
  ( cd /tmp/$tree && export FOXHUNT_EXT_DIR=/tmp/fhext_old PYTHONPATH=/tmp/$tree:/tmp/site
    step ${tree}_build timeout 150 python3 benchmarks/gpu_check.py build
    step ${tree}_update timeout 90 python3 benchmarks/gpu_check.py update --json $R/update_$tree.json
    step ${tree}_kprof timeout 90 python3 benchmarks/gpu_check.py kernels --json $R/kprof_$tree.json )
done
grep -E "^=== (update|kprof|old_|main_)|^[0-9]+x[0-9]+ +(highest|high)|kernels, .* us per replay" $L
sys() { step $1 timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --rollout-workers 12 --json $R/$1.json; grep -E "env_steps_per_s=" $L | tail -1; }
sysold() { ( cd /tmp/old && export FOXHUNT_EXT_DIR=/tmp/fhext_old PYTHONPATH=/tmp/old:/tmp/site; sys $1 ); }
sys new1; sysold old1
finish
