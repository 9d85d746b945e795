# Session 12 call 3: the bare command on seed 2 (with call 2's B0, B1: three seeds on the new loop), then seed 1 with the
# policy lag held shorter (2 payloads waiting, broadcast every 2: the learner now runs ~50 % more updates a second, so
# the same flow control means a longer lag in updates; session 7 found the lag set how much an update taught).
L=$OUT/call3.log; source .devtools/s9_lib.sh
date -u >> $L; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv >> $L
probe B2 --seed 2
( cd $OUT && tar -czf r.tgz r )
probe L1 --seed 1 --broadcast-every 2 --max-payloads-waiting 2
finish
