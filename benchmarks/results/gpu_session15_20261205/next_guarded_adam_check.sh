# NOT RUN: written in session 15 (device time spent) for the branch guarded-adam-kernel: the learner's device guard
# (grad norms, clip, Adam, soft update, undo) as one op, cuda/kernels/guarded_adam.cu, three launches a network
# for about 60 torch launches. Copy into .devtools/ and, first, make the "before" tree from main:
#   git archive main cuda learner lobsim_env actors foxhunt_ray pyproject.toml tests \
#     $(git ls-files 'benchmarks/*.py' 'benchmarks/*.sh') | gzip > .devtools/old_tree.tgz
# then run with the device tool (carry .devbundle and .devtools), checked out on the branch. About 8 minutes:
# the kernel checks (every op against the float64 reference, now with guarded_adam_'s 12 rows a size; opcheck; the
# learner's CUDA tests, with the new fused-against-composed guard test), compute-sanitizer memcheck and racecheck,
# op timings, the part-3 update table and kernel profile for main and the branch, the update's kernels by learner
# region (gpu_check.py regions: where the next fusion should go), and the whole system once each.
L=$OUT/call1.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step kernels env OUT=$R timeout 240 bash benchmarks/gpu_check.sh kernels
grep -E "rc=|passed|failed" $R/gpu_check.log | tail -10
step update timeout 90 python3 benchmarks/gpu_check.py update --json $R/update.json
step kprof timeout 90 python3 benchmarks/gpu_check.py kernels --json $R/kprof.json
step regions timeout 120 python3 benchmarks/gpu_check.py regions --json $R/regions.json
mkdir -p /tmp/old && tar -xzf .devtools/old_tree.tgz -C /tmp/old
( cd /tmp/old && export FOXHUNT_EXT_DIR=/tmp/fhext_old PYTHONPATH=/tmp/old:/tmp/site
  step old_build timeout 150 python3 benchmarks/gpu_check.py build
  step old_update timeout 90 python3 benchmarks/gpu_check.py update --json $R/update_old.json
  step old_kprof timeout 90 python3 benchmarks/gpu_check.py kernels --json $R/kprof_old.json )
grep -E "^[0-9]+x[0-9]+ +(highest|high)|kernels, .* us per replay" $L
sys() { step $1 timeout 110 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --rollout-workers 12 --json $R/$1.json; grep -E "env_steps_per_s=" $L | tail -1; }
sysold() { ( cd /tmp/old && export FOXHUNT_EXT_DIR=/tmp/fhext_old PYTHONPATH=/tmp/old:/tmp/site; sys $1 ); }
sys new1; sysold old1
finish
