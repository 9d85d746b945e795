"""Runs on a GPU host: every GPU figure in BENCHMARKS.md is one of these steps.

    python3 -m benchmarks.gpu_host.bundle [--rllib]          # here, once: what a GPU image without Ray needs
    python3 -m benchmarks.gpu_host STEP... [--seeds 0 1 2] [--budget-s 570] [--out DIR]   # there
    python3 -m benchmarks.gpu_host --list                    # the steps, their commands and time limits

Steps (run in the order given, each a named folder of logs and JSON under the output folder):

- build: the CUDA extension (`benchmarks/gpu_check.py build`, cached in FOXHUNT_EXT_DIR).
- checks: the CUDA tests with pytest (every kernel against its float64 reference, gradients, opcheck; the captured
  learner against eager; the TF32 tolerances); a test skipped for want of a GPU fails.
  BENCHMARKS.md, "The kernels against their references".
- sanitize: compute-sanitizer memcheck and racecheck on every op forward and backward at B = 128. Same section.
- ops: each op's device time, the kernel against the reference ops (`gpu_check.py ops`). Same section.
- update: the captured update, the custom kernels against the reference ops in the same CUDA graph, float32 and
  TF32 (`gpu_check.py update`). BENCHMARKS.md, "The learner's update".
- profile: the update's kernels by name and by the learner code that launched them (`gpu_check.py kernels`,
  `regions --shapes`). Same section.
- system: the whole system under Ray, one run a seed (`benchmarks/bench_system.py --gpu`).
  BENCHMARKS.md, "The system on one GPU host".
- system_real: the same on real days: lobsim_env's C modules built in place (`benchmarks.gpu_host.build_c`), the
  LOBSTER samples (FOXHUNT_LOBSTER_DATA) ingested into a cache, `bench_system.py --gpu --data` on it, one run a
  seed. BENCHMARKS.md, "The system on one GPU host".
- learn: the main job as a user runs it, one run a seed (`python -m foxhunt_ray.local --time-limit-s 150
  --eval-episodes 256`). BENCHMARKS.md, "Learning on the synthetic market".
- learn_real: the main job on a real day, one run a seed: the AMZN sample (ingested as for system_real) in 13
  half-hour blocks, trained on 09:30-15:00, validated on 15:00-15:30 and evaluated on 15:30-16:00
  (`foxhunt_ray.local --data CACHE --days AMZN --blocks 13 --set market.horizon=200 --time-limit-s 150
  --eval-episodes 256`).
- walkforward: the walk-forward protocol on those half hours, folds 4, 8 and 12, a run a seed of each sharing the
  GPU five at once (`benchmarks/bench_walkforward.py --days AMZN --blocks 13 --parallel 5 --gpus 1`); `--walk-days
  AAPL,GOOG` runs it on other sample days, one bench run each.
- rllib: RLlib's PPO on the same host, one run a seed (`benchmarks/bench_rllib.py --sizing gpu_host`).
  BENCHMARKS.md, "RLlib's PPO on the same machine".
- census: the captured update's launches, counted on the CPU (`gpu_check.py census`): runs anywhere.

Where `import ray` fails (an image without Ray), the steps run with `.devbundle/site.tar.xz` unpacked into
/tmp/site, as `bundle` makes it (carry `.devbundle` along); `rllib` also needs `.devbundle/rllib.tar.xz`
(`bundle --rllib`). At the end everything is packed into `OUT/gpu_host.tar.gz` beside `OUT/gpu_host.log` (each step's
command, exit status, time and the lines that carry its figures) and `OUT/summary.json` (those figures, parsed), so
that the few files a remote machine may hand back hold all of it. `--budget-s` skips a step, or a step's next seed,
that would not end inside the budget at its typical length (a remote call has a limit of its own).
"""
