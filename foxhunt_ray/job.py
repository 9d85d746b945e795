"""`python -m foxhunt_ray.job`: the same run as foxhunt_ray.local, on an existing Ray cluster.

    ray job submit --address http://127.0.0.1:8265 --working-dir . -- python -m foxhunt_ray.job --preset phase4_3

connects with ray.init(address="auto") (the job's RAY_ADDRESS), runs the driver here and the actors wherever the
cluster places them (the learner where `--learner-resources` asks). Every file of the run is written on the node
that runs the job, the head, the learner's checkpoints included (they reach it through the object store); `--storage
ROOT` keeps a copy beyond the head's disk (foxhunt_ray.storage). Flags: the driver's (`--help`). The upload carries
no .git, so code_sha is the content hash (foxhunt_ray.provenance). `ray job stop` sends SIGTERM, then SIGKILL after
RAY_JOB_STOP_WAIT_TIME_S: a stop holds under a burst of signals as in foxhunt_ray.local, whose exit this shares (a
late signal of the burst, while the process exits, is ignored: the exit code is the run's).
"""

from __future__ import annotations

import sys

from foxhunt_ray import driver
from foxhunt_ray.local import _exit


def _ray_init() -> None:
    import ray

    ray.init(address="auto")


def main(argv: list[str] | None = None) -> int:
    return driver.main(argv, prog="python -m foxhunt_ray.job", ray_init=_ray_init)


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
