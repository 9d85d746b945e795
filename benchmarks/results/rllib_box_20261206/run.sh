cd /work/main
for s in 0 1 2; do
  /tmp/rl/bin/python benchmarks/bench_rllib.py --seconds 240 --seed $s --json /tmp/rlb/A$s.json > /tmp/rlb/A$s.log 2>&1
  /tmp/rl/bin/python benchmarks/bench_rllib.py --seconds 240 --seed $s --fragment 64 --epochs 4 --minibatch 512 --json /tmp/rlb/B$s.json > /tmp/rlb/B$s.log 2>&1
done
echo done > /tmp/rlb/finished
