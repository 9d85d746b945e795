#!/usr/bin/env bash
# Issue 13 item 3, a second lever screened on the 2-core build box: the Q heads' replay batch. On the GPU host each
# transition is sampled 0.06 times on average (replay of 262,144 turned over every 16 updates, 1,024 a batch); on
# this box's cpu sizing 0.25 times (256 a batch). Here q_batch_size 1024 (1.0 a transition) against run.sh's
# default-256 trials (n3_s*), same seeds, same 6,000 updates, same scoring. Run from the repository root.
cd "$(git rev-parse --show-toplevel)"
D=benchmarks/results/learning_sweep_20261204
trial() {  # trial CORE NAME SEED QBATCH
  taskset -c "$1" .venv/bin/python benchmarks/learning_sweep.py "{\"name\": \"$2\", \"preset\": \"phase4_3\",
    \"settings\": \"learn\", \"sizing\": \"cpu\", \"steps\": 6000, \"eval_every\": 2000, \"episodes\": 128,
    \"sets\": [\"seed=$3\", \"learner.q_batch_size=$4\"]}" >> $D/trials.jsonl 2>> $D/stderr.log
}
date -u >> $D/stderr.log
trial 0 q1024_s0 0 1024 & trial 1 q1024_s1 1 1024 & wait
trial 0 q1024_s2 2 1024 & wait
date -u >> $D/stderr.log
