# Ran, and found nothing: the machine of calls 1-2 had been given back, so /tmp/snapS0 was gone (call 4 redid the experiment).
# Session 14 call 3 (the machine of calls 1-2, still warm): call 1's snapshot evaluation again, its policies on the
# GPU (call 1 ran them on the CPU and ran out of time before the combinations).
L=$OUT/call3.log; source .devtools/s14_lib.sh
ls /tmp/snapS0 | wc -l >> $L
run=$(ls -d /tmp/runsS0/*/*/0 | head -1)
step S0_snap timeout 500 python3 benchmarks/snapshot_eval.py eval $run --snapshots /tmp/snapS0 --episodes 256 --ensemble 4 8 16 --json $R/S0_snapshots.json
tail -12 $L
finish
