#!/usr/bin/env bash
# Issue 13 item 3: run_nstep.sh's 5-step lead (+907 against +741 at 6,000 updates, seeds 0-2) on two more seeds,
# 3 and 4, with the 3-step default beside it in the same round (one core each). Same set-up as run_nstep.sh.
cd "$(git rev-parse --show-toplevel)"
D=benchmarks/results/learning_sweep_20261205
trial() {  # trial CORE NAME SEED NSTEP
  taskset -c "$1" .venv/bin/python benchmarks/learning_sweep.py "{\"name\": \"$2\", \"preset\": \"phase4_3\",
    \"settings\": \"learn\", \"sizing\": \"cpu\", \"steps\": 6000, \"eval_every\": 2000, \"episodes\": 128,
    \"sets\": [\"seed=$3\", \"learner.n_step=$4\"]}" >> $D/trials.jsonl 2>> $D/stderr.log
}
date -u >> $D/stderr.log
for s in 3 4; do
  trial 0 n3_s$s $s 3 & trial 1 n5_s$s $s 5 & wait
done
date -u >> $D/stderr.log
