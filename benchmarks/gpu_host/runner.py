"""Runs the GPU host's jobs one after another, each with its own folder, log and time limit, and packs the results.

The output folder ends up holding three files whatever happens (each written again after every job, so a call cut
short still hands back what ran): `gpu_host.log` (the machine, the code, and per job its command, exit status, time
and the last lines of its output), `summary.json` (per job the figures its step reads off its output) and
`gpu_host.tar.gz` (every job's folder: its full output and the JSON and files that back a figure).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from benchmarks.gpu_host.steps import Job

BUNDLE = Path(".devbundle/site.tar.xz")
RLLIB_BUNDLE = Path(".devbundle/rllib.tar.xz")
TAIL_LINES = 14


def has_modules(python: str, names: tuple[str, ...]) -> bool:
    code = "import importlib.util, sys; sys.exit(any(importlib.util.find_spec(n) is None for n in sys.argv[1:]))"
    return subprocess.run([python, "-c", code, *names], capture_output=True).returncode == 0


def step_env(repo: Path, python: str, needs_rllib: bool, site: Path = Path("/tmp/site"),
             have=has_modules) -> tuple[dict[str, str], list[str]]:
    """The environment every job runs in, and what was done to make it: the repository on PYTHONPATH, the
    extension's build cache, unbuffered output, and, where this Python lacks Ray, gymnasium or pytest, the bundle
    unpacked into `site` (RLlib's beside it for `needs_rllib`)."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("FOXHUNT_EXT_DIR", "/tmp/fhext")
    notes: list[str] = []
    paths = [str(repo)]
    if not have(python, ("ray", "gymnasium", "pytest")):
        bundle = repo / BUNDLE
        if not bundle.is_file():
            notes.append(f"this Python lacks ray, gymnasium or pytest and there is no {BUNDLE}: make it with "
                         "`python3 -m benchmarks.gpu_host.bundle` where pip reaches PyPI, and carry .devbundle along")
        else:
            if not (site / "ray").is_dir():
                site.mkdir(parents=True, exist_ok=True)
                with tarfile.open(bundle) as tar:
                    tar.extractall(site, filter="tar")
                notes.append(f"unpacked {BUNDLE} into {site}")
            paths.append(str(site))
            env["PATH"] = f"{site / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        if needs_rllib and bundle.is_file():
            rl = site.parent / "rl"
            if not (rl / "rlsite").is_dir():
                if not (repo / RLLIB_BUNDLE).is_file():
                    notes.append(f"no {RLLIB_BUNDLE}: make it with `python3 -m benchmarks.gpu_host.bundle --rllib`")
                else:
                    rl.mkdir(parents=True, exist_ok=True)
                    with tarfile.open(repo / RLLIB_BUNDLE) as tar:
                        tar.extractall(rl, filter="tar")
                    shutil.copytree(rl / "rlray", site / "ray", dirs_exist_ok=True)
                    notes.append(f"unpacked {RLLIB_BUNDLE}: RLlib into {site / 'ray'}, its pins in {rl / 'rlsite'}")
            paths.insert(1, str(rl / "rlsite"))  # gymnasium 1.2.2, RLlib's pin, ahead of the bundle's
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env, notes


class Runner:
    def __init__(self, out: Path, repo: Path, python: str = sys.executable, budget_s: float | None = None,
                 dry_run: bool = False):
        self.out, self.repo, self.python, self.budget_s, self.dry_run = out, repo, python, budget_s, dry_run
        self.work = Path(tempfile.mkdtemp(prefix="gpu_host_"))
        self.scratch = Path(tempfile.mkdtemp(prefix="gpu_host_scratch_"))
        self.summary: dict = {"jobs": []}
        self.t0 = time.monotonic()

    def log(self, text: str) -> None:
        print(text, flush=True)
        if not self.dry_run:
            with (self.out / "gpu_host.log").open("a") as f:
                f.write(text + "\n")

    def run(self, jobs: list[Job]) -> int:
        if not self.dry_run:
            self.out.mkdir(parents=True, exist_ok=True)
            self.log(self._machine())
        failed: list[str] = []
        for job in jobs:
            name = f"{job.step}/{job.label}"
            elapsed = time.monotonic() - self.t0
            if self.budget_s is not None and elapsed + job.expect_s > self.budget_s:
                self.log(f"=== {name}: skipped, {elapsed:.0f} s gone and it takes about {job.expect_s:.0f} s of "
                         f"the {self.budget_s:.0f} s budget")
                self.summary["jobs"].append({"job": name, "skipped": "budget"})
                continue
            rc = self._run_job(job, name)
            if rc != 0:
                failed.append(name)
        if not self.dry_run:
            self._pack()
        shutil.rmtree(self.scratch, ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)
        self.log(f"=== done in {time.monotonic() - self.t0:.0f} s: "
                 + (f"FAILED {' '.join(failed)}" if failed else "every job that ran passed"))
        return 1 if failed else 0

    def _run_job(self, job: Job, name: str) -> int:
        dir = self.work / job.step / job.label
        tmp = self.scratch / job.step / job.label
        argv = [a.format(dir=dir, tmp=tmp) for a in job.argv]
        env, notes = (dict(os.environ), []) if self.dry_run else step_env(self.repo, self.python, job.needs_rllib)
        extra = {k: v.format(dir=dir, tmp=tmp) for k, v in job.env.items()}
        for note in notes:
            self.log(f"    {note}")
        self.log(f"=== {name}: {' '.join(f'{k}={v}' for k, v in extra.items())}{' ' if extra else ''}"
                 f"{' '.join(argv)}  (limit {job.timeout_s:.0f} s)")
        if self.dry_run:
            return 0
        dir.mkdir(parents=True, exist_ok=True)
        tmp.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with (dir / "output.log").open("w") as f:
            try:
                rc = subprocess.run(argv, cwd=self.repo, env={**env, **extra}, stdout=f, stderr=subprocess.STDOUT,
                                    timeout=job.timeout_s).returncode
            except subprocess.TimeoutExpired:
                rc = 124
            except FileNotFoundError as e:
                f.write(f"{e}\n")
                rc = 127
        seconds = time.monotonic() - t0
        output = (dir / "output.log").read_text(errors="replace")
        for line in output.splitlines()[-TAIL_LINES:]:
            self.log(f"    {line}")
        figures = {}
        if job.collect is not None:
            try:
                figures = job.collect(dir, tmp, output)
            except (OSError, ValueError, KeyError) as e:
                figures = {"collect_error": f"{type(e).__name__}: {e}"}
        self.log(f"=== {name} rc={rc}{' (timed out)' if rc == 124 else ''} in {seconds:.0f} s"
                 + (f": {json.dumps(figures)}" if figures else ""))
        self.summary["jobs"].append({"job": name, "rc": rc, "seconds": round(seconds, 1), "argv": argv,
                                     "figures": figures})
        self._pack()
        return rc

    def _machine(self) -> str:
        def cmd(*argv: str) -> str:
            try:
                return subprocess.run(argv, cwd=self.repo, capture_output=True, text=True, timeout=60).stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                return "(not available)"
        self.summary["machine"] = {
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "gpu": cmd("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"),
            "cores": os.cpu_count(),
            "python": sys.version.split()[0],
            "torch": cmd(self.python, "-c", "import torch; print(torch.__version__)"),
            "commit": cmd("git", "rev-parse", "HEAD"),
            "code": cmd(self.python, "-m", "foxhunt_ray.provenance"),
        }
        return "\n".join(f"{k}: {v}" for k, v in self.summary["machine"].items())

    def _pack(self) -> None:
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1) + "\n")
        partial = self.out / "gpu_host.tar.gz.partial"
        with tarfile.open(partial, "w:gz") as tar:
            for step in sorted(self.work.iterdir()):
                tar.add(step, arcname=step.name)
        partial.replace(self.out / "gpu_host.tar.gz")
