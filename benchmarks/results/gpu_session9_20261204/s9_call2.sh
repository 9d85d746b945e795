# Session 9 call 2: bench_system --gpu A/B, new code (this tree) against 10c4e7f, alternating, 40 s each.
L=$OUT/call2.log; source .devtools/s9_lib.sh
python3 benchmarks/gpu_check.py build >/dev/null 2>&1
for i in 1 2; do
  step new$i timeout 120 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --json $R/sys_new$i.json
  (cd .devtools/old10c && FOXHUNT_EXT_DIR=/tmp/fhext_old PYTHONPATH=$PWD:/tmp/site step old$i timeout 150 python3 benchmarks/bench_system.py --gpu --seconds 40 --seed 0 --json $R/sys_old$i.json)
  tail -1 $L
done
grep -E "env_steps_per_s=" $L
finish
