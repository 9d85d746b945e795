# Session 14 call 4 (call 1 again at the bare command's 150 s, seed 1, policies on the GPU): how far the greedy policy moves between checkpoints of one bare-command run, and whether
# picking one by a validation day or averaging several buys anything (benchmarks/snapshot_eval.py).
L=$OUT/call4.log; source .devtools/s14_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
step build timeout 120 python3 benchmarks/gpu_check.py build
snaprun() { local name=$1; shift
  python3 benchmarks/snapshot_eval.py watch /tmp/runs$name --snapshots /tmp/snap$name --every 3 --timeout 400 > $R/${name}_watch.log 2>&1 &
  step $name timeout 240 python3 -m foxhunt_ray.local --time-limit-s 150 --no-eval --checkpoint-interval-s 6 --out /tmp/runs$name "$@"
  wait
  local run=$(ls -d /tmp/runs$name/*/*/0 2>/dev/null | head -1)
  [ -n "$run" ] || { echo "no run folder for $name"; return; }
  cp $run/config.json $R/${name}_config.json; cp $run/summary.json $R/${name}_summary.json 2>/dev/null
  curve $run > $R/${name}_curve.tsv
  step ${name}_snap timeout 230 python3 benchmarks/snapshot_eval.py eval $run --snapshots /tmp/snap$name --episodes 256 --ensemble 4 8 16 --json $R/${name}_snapshots.json
  tail -12 $L
}
snaprun S1 --seed 1
finish
