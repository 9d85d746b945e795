#!/usr/bin/env bash
# Issue 13 item 3: the n-step length again, longer this time. Session 12's box screen (learning_sweep_20261204/run.sh)
# found 3-step Q targets far ahead of 1-step ones (+741 against +532 at 6,000 updates, 3 seeds); the regime lasts
# about 200 steps (switch probability 0.005), so longer returns may carry more of it. n_step 5 and 8 here, same
# set-up as that screen (phase4_3, settings learn, sizing cpu: 64 books x 16 steps a rollout, so an n-step return
# stops at the rollout's end; 6,000 updates, 128 held-out episodes every 2,000), against its n3_s* trials.
# Run from the repository root: bash benchmarks/results/learning_sweep_20261205/run_nstep.sh
cd "$(git rev-parse --show-toplevel)"
D=benchmarks/results/learning_sweep_20261205
trial() {  # trial CORE NAME SEED NSTEP
  taskset -c "$1" .venv/bin/python benchmarks/learning_sweep.py "{\"name\": \"$2\", \"preset\": \"phase4_3\",
    \"settings\": \"learn\", \"sizing\": \"cpu\", \"steps\": 6000, \"eval_every\": 2000, \"episodes\": 128,
    \"sets\": [\"seed=$3\", \"learner.n_step=$4\"]}" >> $D/trials.jsonl 2>> $D/stderr.log
}
date -u >> $D/stderr.log
for s in 0 1 2; do
  trial 0 n8_s$s $s 8 & trial 1 n5_s$s $s 5 & wait
done
date -u >> $D/stderr.log
