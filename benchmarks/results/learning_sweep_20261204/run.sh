#!/usr/bin/env bash
# Issue 13 item 3, a lever screened on the 2-core build box before the GPU: the n-step length of the Q targets.
# phase4_3, settings learn, sizing cpu (the main job's on this box), seeds 0-2, n_step 3 (the default) and 1;
# 6,000 learner updates each, the greedy policy scored on 128 held-out episodes every 2,000. Two trials at a
# time, one core each. Run from the repository root: bash benchmarks/results/learning_sweep_20261204/run.sh
cd "$(git rev-parse --show-toplevel)"
D=benchmarks/results/learning_sweep_20261204
trial() {  # trial CORE NAME SEED NSTEP
  taskset -c "$1" .venv/bin/python benchmarks/learning_sweep.py "{\"name\": \"$2\", \"preset\": \"phase4_3\",
    \"settings\": \"learn\", \"sizing\": \"cpu\", \"steps\": 6000, \"eval_every\": 2000, \"episodes\": 128,
    \"sets\": [\"seed=$3\", \"learner.n_step=$4\"]}" >> $D/trials.jsonl 2>> $D/stderr.log
}
date -u >> $D/stderr.log
for s in 0 1 2; do
  trial 0 n3_s$s $s 3 & trial 1 n1_s$s $s 1 & wait
done
date -u >> $D/stderr.log
