"""The fault battery: every case of docs/faults.md and docs/input-limits.md, and every reproduction of issue 42, run
as a user runs them, one at a time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fault_battery.py [--only NAME[,NAME...]] [--group G] [--list]

Each case is a command line in a subprocess (`python -m foxhunt_ray.local --serial ...` mostly; Ray mode where the
case is an actor's), in a temporary folder of its own, under a time limit and a memory watch (the resident memory
of the process and everything it started, summed, polled every 0.1 s). Some cases act while the command runs: a
signal, a link planted mid-run, an actor killed or stopped. For each case the battery records the exit code,
whether the output holds a Python traceback, whether it hung (the time limit ended it), its peak memory, whether
the output says what the case expects (the value and the fix, a per-case list of substrings), and whether what was
already written stays whole: a folder that must be left as it was is compared file by file; every run folder the
case touched must read as before (diag.jsonl through actors.diag_file.read_diag, each step once and in order; every
kept checkpoint through actors.checkpoints.read_checkpoint; summary.json as JSON; no `.tmp` left), and a file a
planted link points at must keep its bytes. It prints a table, then

    cases=<n> tracebacks=<t> hangs=<h> memory_blowups=<m> data_loss=<d>

(`unexpected` lists the cases whose exit code or message was not the expected one). Two runs it copies are made
once, at the start (a finished smoke run of 20 updates, checkpoints at 10 and 20; a run killed by a rule). A full
disk is a small tmpfs when the battery runs as root (else only the file-size limit simulates one). Nothing here is a
unit test: tests/test_faults.py and its siblings hold the cases; tests/test_faults_battery.py checks only that the
case list is well formed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PY = sys.executable
TRACEBACK = "Traceback (most recent call last)"
SMOKE = ["--preset", "smoke", "--quiet", "--checkpoint-interval-s", "0"]
GIB = 2**30


# ---------------------------------------------------------------------------------------------- the case


@dataclass
class Ctx:
    """One case's temporary folder: `out` is its runs root, `run` a copy of a base run (OUT/<sha>/r/0) when the
    case asked for one; `keep` names files (planted links' targets) whose bytes must not change, `planted` paths
    left out of the folder comparison, `extra` other folders to check whole."""

    t: Path
    bases: dict[str, Path]
    out: Path = field(init=False)
    run: Path | None = None
    keep: dict[Path, bytes] = field(default_factory=dict)
    planted: set[Path] = field(default_factory=set)
    extra: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    preexec: Callable[[], None] | None = None
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self):
        self.out = self.t / "runs"

    def copy_run(self, base: str = "finished", name: str = "r") -> Path:
        src = self.bases[base]
        self.run = self.out / src.parent.parent.name / name / "0"
        shutil.copytree(src, self.run, symlinks=True)
        return self.run

    def victim(self, text: bytes = b"precious\n") -> Path:
        path = self.t / "victim"
        path.write_bytes(text)
        self.keep[path] = text
        return path

    def plant_link(self, path: Path, target: Path) -> Path:
        path.unlink(missing_ok=True)
        path.symlink_to(target)
        self.planted.add(path)
        return path

    def fifo(self, path: Path) -> Path:
        path.unlink(missing_ok=True)
        os.mkfifo(path)
        self.planted.add(path)
        return path

    def file(self, name: str, data: bytes | str) -> Path:
        path = self.t / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path

    def sparse(self, path: Path, size: int) -> Path:
        with open(path, "wb") as f:
            f.truncate(size)
        return path


@dataclass
class Case:
    name: str
    group: str
    cmd: Callable[[Ctx], list[str]]
    """The arguments after `python`, of the case's Ctx."""
    exit: tuple[int, ...]
    says: tuple[str, ...] = ()
    """Substrings the output must hold (the value and the fix); `{run}`, `{t}`, `{out}` are the case's paths."""
    setup: Callable[[Ctx], None] | None = None
    during: Callable[[Ctx, subprocess.Popen], None] | None = None
    """Runs once the command has started (a signal, a kill, a link planted mid-run)."""
    folder: str = "whole"
    """'untouched' (the run copy byte for byte as before), 'whole' (every run folder reads as a run), '' (none)."""
    limit_s: float = 90.0
    mem_gib: float = 2.5
    ray: bool = False
    note: str = ""


def local(*args: str) -> list[str]:
    return ["-m", "foxhunt_ray.local", *args]


def load_export(folder: Path) -> list[str]:
    """foxhunt_ray.export.load(folder), a Python API: its refusal (EvaluationError) printed, exit 1."""
    return ["-c", "from foxhunt_ray import export, evaluate\ntry:\n"
            f"    export.load({str(folder)!r})\nexcept evaluate.EvaluationError as err:\n"
            "    print('refused:', err)\n    raise SystemExit(1)\n"]


def serial(ctx: Ctx, *args: str, steps: int = 30) -> list[str]:
    """A resume of the case's run copy, serial, no evaluation."""
    return local("--serial", "--quiet", "--no-eval", "--resume", str(ctx.run), "--steps", str(steps), *args)


def new_run(ctx: Ctx, *args: str, name: str = "n", steps: int = 20) -> list[str]:
    return local(*SMOKE, "--serial", "--no-eval", "--out", str(ctx.out), "--name", name, "--steps", str(steps), *args)


def run_folder_of(ctx: Ctx, name: str) -> Path | None:
    found = sorted(ctx.out.glob(f"*/{name}/0"))
    return found[0] if found else None


def wait_lines(ctx: Ctx, proc: subprocess.Popen, n: int, *, name: str | None = None, timeout: float = 120) -> Path:
    """Waits until the run folder (the copy, or OUT/*/name/0) has a diag.jsonl of at least n lines."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        folder = ctx.run if name is None else run_folder_of(ctx, name)
        diag = folder / "diag.jsonl" if folder else None
        if diag and diag.is_file() and diag.read_bytes().count(b"\n") >= n:
            return folder
        time.sleep(0.05)
    raise TimeoutError(f"no {n} diag lines in {timeout} s")


def signals(sig: int, count: int, gap_s: float = 0.01, *, after: int = 4, name: str | None = None):
    def act(ctx: Ctx, proc: subprocess.Popen) -> None:
        wait_lines(ctx, proc, after, name=name)
        for _ in range(count):
            if proc.poll() is None:
                os.kill(proc.pid, sig)
            time.sleep(gap_s)

    return act


def flood(ctx: Ctx, proc: subprocess.Popen, name: str = "n") -> None:
    """SIGTERM every 20 ms until the process exits: the late ones must not change how it ends."""
    wait_lines(ctx, proc, 4, name=name)
    while proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------- setups


def copy(base: str = "finished"):
    return lambda ctx: ctx.copy_run(base)


def with_copy(fn: Callable[[Ctx], None], base: str = "finished"):
    def setup(ctx: Ctx) -> None:
        ctx.copy_run(base)
        fn(ctx)

    return setup


def link_in_run(name: str):
    def setup(ctx: Ctx) -> None:
        ctx.copy_run()
        ctx.plant_link(ctx.run / name, ctx.victim())

    return setup


def lock_link_only(ctx: Ctx) -> None:
    """OUT/<code_sha>/r/0 holding nothing but a run.lock that links to a victim file."""
    ctx.copy_run()
    for p in sorted(ctx.run.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    ctx.plant_link(ctx.run / "run.lock", ctx.victim())


def diag_edit(edit: Callable[[list[bytes]], list[bytes]]):
    def setup(ctx: Ctx) -> None:
        ctx.copy_run()
        diag = ctx.run / "diag.jsonl"
        lines = diag.read_bytes().splitlines(keepends=True)
        diag.write_bytes(b"".join(edit(lines)))

    return setup


def step_lines(lines: list[bytes]) -> list[int]:
    return [i for i, line in enumerate(lines) if b'"step"' in line and b'"event"' not in line]


def duplicate_step(lines):
    i = step_lines(lines)[9]
    return [*lines[:i + 1], lines[i], *lines[i + 1:]]


def gap(lines):
    i = step_lines(lines)[9]
    return lines[:i] + lines[i + 2 :]


def torn_middle(lines):
    i = step_lines(lines)[9]
    return [*lines[:i], lines[i][:len(lines[i]) // 2] + b"\n", *lines[i + 1:]]


def torn_last(lines):
    return [*lines[:-1], lines[-1][:len(lines[-1]) // 2]]


def ckpt_edit(edit: Callable[[Path], None], which: int = -1):
    def setup(ctx: Ctx) -> None:
        from actors.checkpoints import list_checkpoints

        ctx.copy_run()
        for _, path in list_checkpoints(ctx.run)[which:] if which == -1 else list_checkpoints(ctx.run):
            edit(path)

    return setup


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: 4096])


def empty(path: Path) -> None:
    path.write_bytes(b"")


def garbage(path: Path) -> None:
    path.write_bytes(os.urandom(65536))


def unsafe_pickle(path: Path) -> None:
    import pickle

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned > /dev/null",))

    path.write_bytes(pickle.dumps({"format": "foxhunt_ray.run/1", "x": Boom()}))


def other_shape(path: Path) -> None:
    import torch

    from actors.checkpoints import read_checkpoint

    state = read_checkpoint(path)
    params = state["learner"]
    for key, value in params.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.numel() > 1:
            params[key] = value[:-1].clone()
            break
    else:
        raise RuntimeError("no tensor to cut")
    torch.save(state, path)


def fifo_ckpt(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def sparse_ckpt(path: Path) -> None:
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(64 * GIB)


def edit_config(ctx: Ctx, *, drop_sha: bool = False) -> None:
    ctx.copy_run()
    cfg = ctx.run / "config.json"
    doc = json.loads(cfg.read_text())
    doc["run"]["market"]["horizon"] = 37
    cfg.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if drop_sha:
        (ctx.run / "config.sha256").unlink()


def summary_status(status: str):
    def setup(ctx: Ctx) -> None:
        ctx.copy_run()
        path = ctx.run / "summary.json"
        doc = json.loads(path.read_text())
        doc["status"] = status
        path.write_text(json.dumps(doc))

    return setup


def no_checkpoint(ctx: Ctx) -> None:
    ctx.copy_run()
    shutil.rmtree(ctx.run / "checkpoints")
    (ctx.run / "summary.json").unlink()


def no_config(ctx: Ctx) -> None:
    ctx.copy_run()
    (ctx.run / "config.json").unlink()


def tmpfs(size: str):
    """--out on a tmpfs of `size` (root only; else the case's limit of ulimit -f does the same)."""

    def setup(ctx: Ctx) -> None:
        ctx.out.mkdir(parents=True)
        if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(ctx.out)],
                                                capture_output=True).returncode == 0:
            ctx.cleanup.append(lambda: subprocess.run(["umount", "-l", str(ctx.out)], capture_output=True))
        else:
            ctx.preexec = file_size_limit(3 * 2**20)

    return setup


def file_size_limit(limit: int) -> Callable[[], None]:
    def preexec() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


def fsize(limit: int):
    def setup(ctx: Ctx) -> None:
        ctx.preexec = file_size_limit(limit)

    return setup


def lobster_zip(kind: str):
    """A day zip of `kind`: garbage bytes, a zip bomb, a sample cut short, a zip whose member is a folder."""

    def setup(ctx: Ctx) -> None:
        path = ctx.t / "AAPL_2012-06-21_34200000_57600000_1.zip"
        if kind == "garbage":
            path.write_bytes(os.urandom(10000))
        elif kind == "bomb":
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
                for member in ("AAPL_2012-06-21_34200000_57600000_message_1.csv",
                               "AAPL_2012-06-21_34200000_57600000_orderbook_1.csv"):
                    with z.open(member, "w", force_zip64=True) as f:
                        block = b"0" * 2**20
                        for _ in range(200):
                            f.write(block)
        elif kind == "truncated":
            sample = ROOT / ".devdata/lobster/LOBSTER_SampleFile_AAPL_2012-06-21_1.zip"
            path.write_bytes(sample.read_bytes()[: sample.stat().st_size // 2] if sample.is_file() else b"PK\x03\x04")
        else:
            raise ValueError(kind)

    return setup


# ---------------------------------------------------------------------------------------------- actions mid-run


def plant_mid_run(relative: str, after: int = 12):
    """Waits for `after` diag lines, then plants a link at run folder/relative (a name the run writes later)."""

    def act(ctx: Ctx, proc: subprocess.Popen) -> None:
        folder = wait_lines(ctx, proc, after, name="n")
        target = ctx.victim()
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        ctx.plant_link(path, target)

    return act


def actor(role: str, sig: int, *, after: int = 6, cont_after: float | None = None):
    """Waits for `after` diag lines of the Ray run, then sends `sig` to its `role` actor's process (ray::<role>)."""

    def act(ctx: Ctx, proc: subprocess.Popen) -> None:
        wait_lines(ctx, proc, after, name="n", timeout=200)
        pids = [p for p in tree(proc.pid) if cmdline(p).startswith(f"ray::{role}")]
        if not pids:
            raise RuntimeError(f"no ray::{role} process below {proc.pid}")
        os.kill(pids[0], sig)
        if cont_after is not None:
            time.sleep(cont_after)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids[0], signal.SIGCONT)

    return act


def when_said(text: str, sig: int):
    """Waits until the command's output says `text`, then sends `sig`."""

    def act(ctx: Ctx, proc: subprocess.Popen) -> None:
        end = time.monotonic() + 120
        while time.monotonic() < end and proc.poll() is None:
            if text in (ctx.t / "output.txt").read_text(errors="replace"):
                os.kill(proc.pid, sig)
                return
            time.sleep(0.05)
        raise TimeoutError(f"the output never said {text!r}")

    return act


def storage_goes_away(ctx: Ctx, proc: subprocess.Popen) -> None:
    """The storage root replaced by a file mid-run: every copy there fails from then on."""
    wait_lines(ctx, proc, 10, name="n")
    store = ctx.t / "store"
    shutil.rmtree(store)
    store.write_text("not a folder any more\n")


def resume_the_copy_while_running(ctx: Ctx) -> None:
    """Issue 42 item 3: a run copying to --storage goes on in the background while the case resumes its copy."""
    argv = new_run(ctx, "--storage", str(ctx.t / "store"), "--checkpoint-every", "10", name="bg", steps=100000)
    bg = subprocess.Popen([PY, *argv], cwd=ctx.t, env=child_env(ctx), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    ctx.cleanup.append(lambda: stop(bg))
    end = time.monotonic() + 120
    while time.monotonic() < end and not list((ctx.t / "store").glob("*/bg/0/checkpoints/ckpt_*.pt")):
        time.sleep(0.2)
    (copy_dir,) = (ctx.t / "store").glob("*/bg/0")
    ctx.run = copy_dir
    ctx.extra.append(copy_dir)


def running_writer(ctx: Ctx) -> None:
    """A run of the case's copy goes on in the background while the case resumes the same folder."""
    ctx.copy_run()
    bg = subprocess.Popen([PY, *serial(ctx, steps=100000)], cwd=ctx.t, env=child_env(ctx), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    ctx.cleanup.append(lambda: stop(bg))
    lines = (ctx.run / "diag.jsonl").read_bytes().count(b"\n")
    end = time.monotonic() + 60
    while time.monotonic() < end and (ctx.run / "diag.jsonl").read_bytes().count(b"\n") < lines + 3:
        time.sleep(0.1)


def killed_writer(ctx: Ctx) -> None:
    """The writer of the case's copy killed with SIGKILL mid-run: its lock goes with it."""
    ctx.copy_run()
    bg = subprocess.Popen([PY, *serial(ctx, steps=100000)], cwd=ctx.t, env=child_env(ctx),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    lines = (ctx.run / "diag.jsonl").read_bytes().count(b"\n")
    end = time.monotonic() + 60
    while time.monotonic() < end and (ctx.run / "diag.jsonl").read_bytes().count(b"\n") < lines + 5:
        time.sleep(0.1)
    os.kill(bg.pid, signal.SIGKILL)
    bg.wait()


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait()


# ---------------------------------------------------------------------------------------------- the cases


def cases() -> list[Case]:
    c: list[Case] = []
    add = c.append
    untouched = "untouched"

    # -- one writer per run folder
    add(Case("resume_while_running", "writer", lambda x: serial(x, steps=100000), (1,),
             ("is being written by pid", "wait for that run to end", "nothing was written"), running_writer))
    add(Case("resume_after_kill9", "writer", lambda x: serial(x, steps=60), (0,), (), killed_writer))

    # -- links, FIFOs and endless inputs (issue 42 items 1 and 2)
    for name in ("run.lock", "diag.jsonl", "summary.json", "config.json", "summary.json.tmp",
                 "checkpoints/ckpt_00000030.pt.tmp"):
        slug = re.sub(r"\W+", "_", name).strip("_")
        add(Case(f"link_{slug}", "links", lambda x: serial(x), (1,),
                 ("is a symbolic link to", "rm ", "nothing was written"), link_in_run(name), folder=untouched))
    add(Case("link_lock_new_run", "links", lambda x: new_run(x, name="r"), (1,), ("is a symbolic link to", "rm "),
             lock_link_only, folder=untouched, note="issue 42 item 1: a new run into a folder holding only the link"))
    add(Case("link_planted_mid_run_ckpt_tmp", "links", lambda x: new_run(x, "--checkpoint-every", "20", steps=200),
             (1,), ("is a symbolic link", "ckpt_00000040.pt.tmp"),
             during=plant_mid_run("checkpoints/ckpt_00000040.pt.tmp"),
             note="a link planted after the lock's check, at the next checkpoint's temporary name"))
    add(Case("link_planted_mid_run_summary_tmp", "links", lambda x: new_run(x, "--checkpoint-every", "1000", steps=60),
             (1,), ("is a symbolic link", "summary.json.tmp"), during=plant_mid_run("summary.json.tmp")))
    add(Case("config_dev_zero", "endless", lambda x: new_run(x, "--config", "/dev/zero"), (1,),
             ("--config", "/dev/zero", "character device", "pass a TOML file"), folder=""))
    add(Case("config_fifo", "endless", lambda x: new_run(x, "--config", str(x.t / "cfg.toml")), (1,),
             ("FIFO", "cfg.toml"), lambda x: x.fifo(x.t / "cfg.toml"), folder=""))
    add(Case("config_oversized", "endless", lambda x: new_run(x, "--config", str(x.t / "big.toml")), (1,),
             ("over the limit", "MAX_TEXT_BYTES"), lambda x: x.sparse(x.t / "big.toml", 20_000_000), folder=""))
    add(Case("baseline_dev_zero", "endless", lambda x: new_run(x, "--baseline", "/dev/zero"), (1,),
             ("/dev/zero", "not a regular file"), folder=""))
    add(Case("baseline_fifo", "endless", lambda x: new_run(x, "--baseline", str(x.t / "diag.jsonl")), (1,),
             ("FIFO",), lambda x: x.fifo(x.t / "diag.jsonl"), folder=""))
    add(Case("baseline_link_dev_zero", "endless", lambda x: new_run(x, "--baseline", str(x.t / "b")), (1,),
             ("character device",), lambda x: x.plant_link(x.t / "b", Path("/dev/zero")), folder=""))
    for name in ("config.json", "summary.json", "diag.jsonl", "config.written.json"):
        slug = name.replace(".", "_")
        add(Case(f"resume_{slug}_fifo", "endless", lambda x: serial(x), (1,), ("FIFO", name),
                 with_copy(lambda x, n=name: x.fifo(x.run / n)), folder=untouched))
    add(Case("resume_diag_oversized", "endless", lambda x: serial(x), (1,), ("over the limit",),
             with_copy(lambda x: x.sparse(x.run / "diag.jsonl", 3 * GIB)), folder=""))
    add(Case("resume_run_dir_fifo", "endless", lambda x: local("--serial", "--resume", str(x.t / "rd")), (1,),
             ("FIFO", "not a run folder"), lambda x: x.fifo(x.t / "rd"), folder=""))
    add(Case("resume_run_dir_dev_zero_link", "endless", lambda x: local("--serial", "--resume", str(x.t / "rd")),
             (1,), ("not a run folder",), lambda x: x.plant_link(x.t / "rd", Path("/dev/zero")), folder=""))
    add(Case("report_fifo", "endless", lambda x: ["-m", "foxhunt_ray.report", str(x.t / "rd"), "--out",
                                                 str(x.t / "rep")], (1,), ("FIFO",), lambda x: x.fifo(x.t / "rd"),
             folder=""))
    add(Case("evaluate_diag_fifo", "endless", lambda x: ["-m", "foxhunt_ray.evaluate", str(x.run), "--episodes", "4",
                                                        "--quiet"], (1,), ("FIFO",),
             with_copy(lambda x: x.fifo(x.run / "diag.jsonl")), folder=untouched))
    add(Case("resume_ckpt_fifo", "endless", lambda x: serial(x), (0,), ("cannot be used", "FIFO"),
             ckpt_edit(fifo_ckpt), note="the newest checkpoint a FIFO: a fallback, not a hang"))
    add(Case("resume_ckpt_sparse_64g", "endless", lambda x: serial(x), (0,), ("cannot be used",),
             ckpt_edit(sparse_ckpt), note="the newest checkpoint a 64 GiB file of zeros"))
    add(Case("resume_checkpoint_dev_zero", "endless", lambda x: serial(x, "--resume-checkpoint", "/dev/zero"), (1,),
             ("--resume-checkpoint", "/dev/zero"), copy(), folder=untouched))
    add(Case("evaluate_checkpoint_dev_zero", "endless",
             lambda x: ["-m", "foxhunt_ray.evaluate", str(x.run), "--checkpoint", "/dev/zero", "--quiet"], (1,),
             ("/dev/zero",), copy(), folder=untouched))
    add(Case("evaluate_ckpt_fifo", "endless",
             lambda x: ["-m", "foxhunt_ray.evaluate", str(x.run), "--episodes", "4", "--quiet"], (1,),
             ("FIFO",), ckpt_edit(fifo_ckpt), folder=untouched))
    add(Case("export_checkpoint_dev_zero", "endless",
             lambda x: ["-m", "foxhunt_ray.export", str(x.run), "--checkpoint", "/dev/zero", "--out", str(x.t / "e")],
             (1,), ("/dev/zero",), copy(), folder=untouched))
    add(Case("export_ckpt_fifo", "endless", lambda x: ["-m", "foxhunt_ray.export", str(x.run), "--out",
                                                      str(x.t / "e")], (1,), ("FIFO",), ckpt_edit(fifo_ckpt),
             folder=untouched))
    add(Case("export_manifest_dev_zero", "endless",
             lambda x: load_export(x.t / "e"), (1,), ("refused:", "policy.json", "not a regular file"),
             lambda x: (x.t / "e").mkdir() or x.plant_link(x.t / "e" / "policy.json", Path("/dev/zero")), folder="",
             note="export.load (Python API) of a folder whose policy.json is /dev/zero"))
    add(Case("export_manifest_fifo", "endless",
             lambda x: load_export(x.t / "e"), (1,), ("refused:", "policy.json", "FIFO"),
             lambda x: (x.t / "e").mkdir() or x.fifo(x.t / "e" / "policy.json"), folder=""))

    # -- a damaged diag.jsonl: resume, report, evaluate
    for slug, edit, says in (("duplicate", duplicate_step, "a duplicated or out-of-order step"),
                             ("gap", gap, "missing"), ("torn_middle", torn_middle, "not valid JSON")):
        add(Case(f"diag_{slug}_resume", "diag", lambda x: serial(x), (1,), (says, "head -n"), diag_edit(edit),
                 folder=untouched))
        add(Case(f"diag_{slug}_report", "diag", lambda x: ["-m", "foxhunt_ray.report", str(x.run), "--out",
                                                           str(x.t / "rep")], (1,), (says, "head -n"),
                 diag_edit(edit), folder=untouched))
        add(Case(f"diag_{slug}_evaluate", "diag", lambda x: ["-m", "foxhunt_ray.evaluate", str(x.run), "--episodes",
                                                             "4", "--quiet"], (1,), (says, "head -n"),
                 diag_edit(edit), folder=untouched))
    add(Case("diag_torn_last_resume", "diag", lambda x: serial(x), (0,), (), diag_edit(torn_last)))
    add(Case("diag_torn_last_report", "diag", lambda x: ["-m", "foxhunt_ray.report", str(x.run), "--out",
                                                         str(x.t / "rep")], (0,), ("partial last line",),
             diag_edit(torn_last), folder=untouched))
    add(Case("diag_binary", "diag", lambda x: serial(x), (1,), ("diag.jsonl",),
             diag_edit(lambda lines: [*lines[:5], os.urandom(3000) + b"\n", *lines[5:]]), folder=untouched))

    # -- resume
    for slug, edit in (("truncated", truncate), ("empty", empty), ("garbage", garbage),
                       ("unsafe_pickle", unsafe_pickle), ("other_shape", other_shape)):
        add(Case(f"ckpt_{slug}_fallback", "resume", lambda x: serial(x), (0,),
                 ("cannot be used", "falling back to the older checkpoint", "--resume-checkpoint"), ckpt_edit(edit)))
        add(Case(f"ckpt_{slug}_all", "resume", lambda x: serial(x), (1,),
                 ("no kept checkpoint can be loaded", "--resume-checkpoint", "nothing was changed"),
                 ckpt_edit(edit, which=0), folder=untouched))
    add(Case("resume_checkpoint_missing_step", "resume", lambda x: serial(x, "--resume-checkpoint", "15"), (1,),
             ("--resume-checkpoint",), copy(), folder=untouched))
    add(Case("resume_checkpoint_negative", "resume", lambda x: serial(x, "--resume-checkpoint", "-1"), (1, 2),
             ("--resume-checkpoint",), copy(), folder=untouched))
    add(Case("resume_checkpoint_older", "resume", lambda x: serial(x, "--resume-checkpoint", "10"), (0,), (), copy()))
    add(Case("resume_checkpoint_zero", "resume", lambda x: serial(x, "--resume-checkpoint", "0"), (0,),
             ("starting over from step 0",), copy()))
    add(Case("resume_no_checkpoint", "resume", lambda x: serial(x), (0,), ("holds no checkpoint",), no_checkpoint))
    add(Case("new_run_over_no_checkpoint", "resume", lambda x: new_run(x, name="r"), (0,),
             ("ended before its first checkpoint",), no_checkpoint))
    add(Case("new_run_into_a_run", "resume", lambda x: new_run(x, name="r"), (1,), ("already holds a run",
                                                                                      "--resume"), copy(),
             folder=untouched))
    add(Case("resume_killed_run", "resume", lambda x: serial(x), (1,), ("was killed by rule", "--resume-checkpoint"),
             copy("killed"), folder=untouched))
    add(Case("resume_killed_run_on_purpose", "resume", lambda x: serial(x, "--resume-checkpoint", "4"), (3,), (),
             copy("killed")))
    add(Case("config_edited", "resume", lambda x: serial(x), (1,),
             ("run.market.horizon: 200 -> 37", "--allow-config-change"), edit_config, folder=untouched))
    add(Case("config_edited_allowed", "resume", lambda x: serial(x, "--allow-config-change"), (0,),
             ("accepted (--allow-config-change)",), edit_config))
    add(Case("config_edited_no_sha256", "resume", lambda x: serial(x), (1,),
             ("run.market.horizon: 200 -> 37", "--allow-config-change"),
             lambda x: edit_config(x, drop_sha=True), folder=untouched))
    add(Case("config_json_garbage", "resume", lambda x: serial(x), (1,), ("config.json",),
             with_copy(lambda x: (x.run / "config.json").write_text("{not json")), folder=untouched))
    add(Case("summary_json_garbage", "resume", lambda x: serial(x), (1,), ("summary.json cannot be read", "rm "),
             with_copy(lambda x: (x.run / "summary.json").write_text("{not json")), folder="untouched"))
    add(Case("resume_done_same_steps", "resume", lambda x: serial(x, steps=20), (1,),
             ("is done at update 20", "--steps"), copy(), folder=untouched))
    add(Case("resume_missing_config", "resume", lambda x: serial(x), (1,),
             ("not its config.json", "cp "), no_config, folder=untouched))
    add(Case("evaluate_missing_config", "resume", lambda x: ["-m", "foxhunt_ray.evaluate", str(x.run), "--quiet"],
             (1,), ("not its config.json", "cp "), no_config, folder=untouched))
    add(Case("report_missing_config", "resume", lambda x: ["-m", "foxhunt_ray.report", str(x.run), "--out",
                                                           str(x.t / "rep")], (1,), ("not its config.json", "cp "),
             no_config, folder=untouched))
    add(Case("resume_nothing_there", "resume", lambda x: local("--serial", "--resume", str(x.t / "none")), (1,),
             ("does not exist",), folder=""))
    add(Case("resume_empty_folder", "resume", lambda x: local("--serial", "--resume", str(x.t)), (1,),
             ("config.json does not exist", "pass a run folder"), folder=""))
    add(Case("resume_summary_running_killed", "resume", lambda x: serial(x, steps=40), (0,), (),
             summary_status("running")))

    # -- a full disk
    add(Case("disk_full_tmpfs", "disk", lambda x: new_run(x, "--checkpoint-every", "5", steps=40), (1,),
             ("full", "--resume"), tmpfs("3m")))
    add(Case("disk_fsize_ckpt", "disk", lambda x: new_run(x, "--checkpoint-every", "5", steps=40), (1,),
             ("ulimit -f", "--resume"), fsize(2**20)))
    add(Case("disk_fsize_diag", "disk", lambda x: new_run(x, "--checkpoint-every", "1000", steps=400), (1,),
             ("ulimit -f", "--resume"), fsize(60_000)))

    # -- storage out of reach
    add(Case("storage_unknown_scheme", "storage", lambda x: new_run(x, "--storage", "nosuch://b/runs"), (1,),
             ("--storage", "nosuch"), folder=""))
    add(Case("storage_s3_no_plugin", "storage", lambda x: new_run(x, "--storage", "s3://bucket/runs"), (1,),
             ("--storage", "s3fs"), folder=""))
    add(Case("storage_unwritable", "storage", lambda x: new_run(x, "--storage", str(x.t / "file" / "sub")), (1,),
             ("--storage", "cannot write"), lambda x: x.file("file", "x"), folder=""))
    add(Case("storage_gone_mid_run", "storage",
             lambda x: new_run(x, "--storage", str(x.t / "store"), "--checkpoint-every", "10", steps=60), (1,),
             ("failed", "the run goes on", "copy the folder there yourself"), during=storage_goes_away))
    add(Case("storage_same_as_out", "storage",
             lambda x: new_run(x, "--storage", str(x.out), "--checkpoint-every", "10"), (0, 1), (),
             note="--storage the same folder as --out: the copy is the run folder itself"))
    add(Case("storage_inside_the_run_folder", "storage",
             lambda x: new_run(x, "--storage", str(next(x.out.glob("*")) / "n" / "0" / "store"), "--checkpoint-every",
                               "10"), (0, 1), (), lambda x: x.out.joinpath(x.bases["finished"].parent.parent.name,
                                                                        "n").mkdir(parents=True),
             note="--storage below the run folder: a copy must not copy itself"))
    add(Case("out_is_a_file", "storage", lambda x: new_run(x, "--out", str(x.t / "f")), (1,), ("f",),
             lambda x: x.file("f", "x"), folder=""))
    add(Case("out_dev_null", "storage", lambda x: new_run(x, "--out", "/dev/null"), (1,), ("/dev/null",),
             folder=""))
    add(Case("resume_uri_no_run", "storage", lambda x: local("--serial", "--resume", f"file://{x.t}/none/s/n/0"),
             (1,), ("holds no run",), folder=""))
    add(Case("resume_storage_copy_while_running", "storage", lambda x: serial(x, steps=100000), (1,),
             ("running now", "storage-owner.json", "nothing was changed"), resume_the_copy_while_running,
             limit_s=120, note="issue 42 item 3; the copy, which its run goes on writing, must stay whole"))

    # -- values, configs and flags (issue 42 item 6)
    for slug, args, says in (
        ("rollout_workers_100000", ["--rollout-workers", "100000"], ("rollout_workers=100000", "1..1024")),
        ("horizon_1e12", ["--set", "market.horizon=1000000000000"], ("market.horizon=1000000000000", "16777216")),
        ("preset_nosuch", ["--set", 'preset="nosuch"'], ("nosuch", "--preset NAME")),
        ("several_bad_sets", ["--set", "learner.nosuch=1", "--set", "learner.lr=\"x\"", "--set",
                              "market.horizon=0"], ("nosuch", "learner.lr", "market.horizon")),
        ("steps_negative", ["--steps", "-5"], ("-5",)),
        ("lr_nan", ["--set", "learner.lr=nan"], ("learner.lr",)),
        ("lr_inf", ["--set", "learner.lr=inf"], ("learner.lr",)),
        ("time_limit_nan", ["--time-limit-s", "nan"], ("nan",)),
        ("time_limit_negative", ["--time-limit-s", "-1"], ("-1",)),
        ("envs_per_worker_0", ["--envs-per-worker", "0"], ("num_envs",)),
        ("envs_per_worker_1e9", ["--envs-per-worker", "1000000000"], ("1000000000",)),
        ("hidden_dim_huge", ["--set", "learner.hidden_dim=1000000"], ("learner.hidden_dim", "fits")),
        ("checkpoint_every_0", ["--checkpoint-every", "0"], ("checkpoint",)),
        ("keep_checkpoints_negative", ["--keep-checkpoints", "-1"], ("-1",)),
        ("name_with_slash", ["--name", "../../escape"], ("name",)),
        ("env_id_unknown", ["--env-id", "NoSuchEnv-v9"], ("NoSuchEnv-v9",)),
        ("env_id_module_unknown", ["--env-id", "nosuchmodule:X-v0"], ("nosuchmodule",)),
        ("learner_resources_bad_json", ["--learner-resources", "{bad"], ("--learner-resources",)),
        ("expect_code_sha_wrong", ["--expect-code-sha", "deadbeef"], ("deadbeef",)),
        ("data_dev_zero", ["--data", "/dev/zero"], ("/dev/zero",)),
        ("data_missing", ["--data", "/nonexistent/days"], ("/nonexistent/days",)),
        ("seed_negative", ["--seed", "-1"], ("-1",)),
        ("name_empty", ["--name", ""], ("name",)),
        ("fold_huge", ["--fold", "99999999999999999999"], ("fold",)),
    ):
        add(Case(f"value_{slug}", "values", lambda x, a=tuple(args): new_run(x, *a), (1, 2), says, folder="",
                 note="exit 2: argparse"))
    add(Case("evaluate_horizon_1e9", "values", lambda x: ["-m", "foxhunt_ray.evaluate", str(x.run), "--horizon",
                                                         "1000000000", "--quiet"], (1,), ("--horizon=1000000000",),
             copy(), folder=untouched))
    add(Case("evaluate_episodes_0", "values", lambda x: ["-m", "foxhunt_ray.evaluate", str(x.run), "--episodes",
                                                        "0", "--quiet"], (1, 2), ("--episodes",), copy(),
             folder=untouched))
    add(Case("evaluate_episodes_1e9", "values", lambda x: ["-m", "foxhunt_ray.evaluate", str(x.run), "--episodes",
                                                          "1000000000", "--quiet"], (1, 2), ("--episodes",), copy(),
             folder=untouched))
    for slug, text, says in (
        ("garbage", "\x00\xff not toml [[[", ("cfg.toml",)),
        ("json_wrong_type", '{"learner": {"lr": "fast"}}', ("learner.lr",)),
        ("json_unknown_key", '{"learner": {"nosuch": 1}}', ("nosuch",)),
        ("json_deep", "[" * 200000 + "]" * 200000, ("cfg.json",)),
        ("json_huge_number", '{"learner": {"lr": 1e999}}', ("learner.lr",)),
        ("toml_deep", "a = " + "[" * 100000 + "]" * 100000, ("cfg.toml",)),
    ):
        suffix = ".json" if slug.startswith("json") else ".toml"
        add(Case(f"config_file_{slug}", "configs", lambda x, s=suffix: new_run(x, "--config", str(x.t / f"cfg{s}")),
                 (1,), says, lambda x, s=suffix, t=text: x.file(f"cfg{s}", t), folder=""))
    add(Case("config_file_missing", "configs", lambda x: new_run(x, "--config", str(x.t / "none.toml")), (1,),
             ("none.toml",), folder=""))

    # -- bad data files (docs/input-limits.md)
    for kind in ("garbage", "bomb", "truncated"):
        zip_ = "AAPL_2012-06-21_34200000_57600000_1.zip"
        add(Case(f"lobster_{kind}_reconstruct", "data", lambda x, z=zip_: ["-m", "lobsim_env.lobster.reconstruct",
                                                                            str(x.t / z)], (2,), (zip_,),
                 lobster_zip(kind), folder=""))
        add(Case(f"lobster_{kind}_train", "data",
                 lambda x, z=zip_: new_run(x, "--set", "market.source=\"lobster\"", "--set",
                                           f"market.lobster_path=\"{x.t / z}\""), (1,), (zip_,), lobster_zip(kind),
                 folder=""))
        add(Case(f"lobster_{kind}_evaluate", "data", lambda x, z=zip_: ["-m", "foxhunt_ray.evaluate", str(x.run),
                                                                         "--lobster", str(x.t / z), "--quiet"], (1,),
                 ("cannot build the evaluation market", zip_), with_copy(lobster_zip(kind)), folder=untouched))
        add(Case(f"lobster_{kind}_ingest", "data", lambda x, z=zip_: ["-m", "lobsim_env.data", "ingest", str(x.t / z),
                                                                       "--out", str(x.t / "days")], (1, 2), (zip_,),
                 lobster_zip(kind), folder=""))
    add(Case("ingest_dev_zero", "data", lambda x: ["-m", "lobsim_env.data", "ingest", "/dev/zero", "--out",
                                                  str(x.t / "days")], (1, 2), ("/dev/zero",), folder=""))
    add(Case("data_check_garbage_cache", "data", lambda x: ["-m", "lobsim_env.data", "check", str(x.t / "days")],
             (1, 2), ("days",), lambda x: (x.t / "days").mkdir() or x.file("days/index.json", "{bad"), folder=""))

    # -- payloads (the wire decoder, as the learner actor calls it)
    for slug, make, says in (
        ("garbage", "os.urandom(4096)", "payload"),
        ("empty", "b''", "payload"),
        ("huge_header_length", "b'FXW2' + (2**32 - 1).to_bytes(4, 'little') + bytes(64)", "header"),
        ("declared_4g_array", "bomb()", "payload"),
    ):
        code = (
            "import os, msgpack, struct\n"
            "from actors import wire\n"
            "def bomb():\n"
            "    h = msgpack.packb({'wire_version': 2, 'policy_version': 0, 'fold': 0, 'worker_index': 0,"
            " 'env_steps': 4, 'arrays': {k: [d, [2**16] * 4, 64] for k, (d, _, _) in wire.ARRAYS.items()}})\n"
            "    return wire.MAGIC + struct.pack('<I', len(h)) + h + bytes(128)\n"
            f"try:\n    wire.decode({make})\nexcept wire.WireError as err:\n"
            "    print('refused:', err)\n    raise SystemExit(1)\n"
        )
        add(Case(f"payload_{slug}", "payloads", lambda x, c=code: ["-c", c], (1,), ("refused:", says), folder=""))

    # -- signals (serial; the job entry likewise)
    add(Case("sigterm_one", "signals", lambda x: new_run(x, steps=100000), (0,), ("interrupted at update",),
             during=signals(signal.SIGTERM, 1, name="n")))
    add(Case("sigint_two", "signals", lambda x: new_run(x, steps=100000), (0,), ("interrupted at update",),
             during=signals(signal.SIGINT, 2, name="n")))
    add(Case("sigterm_burst_three", "signals", lambda x: new_run(x, steps=100000), (0,), ("interrupted at update",),
             during=signals(signal.SIGTERM, 3, name="n")))
    add(Case("sigterm_flood_local", "signals", lambda x: new_run(x, steps=100000), (0,), ("interrupted at update",),
             during=flood))
    add(Case("sigterm_flood_job", "signals",
             lambda x: ["-m", "foxhunt_ray.job", *SMOKE, "--serial", "--out", str(x.out), "--name", "n", "--steps",
                        "100000"], (0,), ("interrupted at update",), during=flood,
             note="python -m foxhunt_ray.job, serial: late signals of the burst while it exits"))
    add(Case("sigterm_during_evaluation", "signals",
             lambda x: local(*SMOKE, "--serial", "--out", str(x.out), "--name", "n", "--steps", "10",
                             "--eval-episodes", "256"), (0, 1, 130, 143), (),
             during=when_said("held-out evaluation", signal.SIGTERM),
             note="the run done, SIGTERM while local evaluates it"))
    add(Case("sigint_during_evaluation", "signals",
             lambda x: local(*SMOKE, "--serial", "--out", str(x.out), "--name", "n", "--steps", "10",
                             "--eval-episodes", "256"), (0, 1, 130), (),
             during=when_said("held-out evaluation", signal.SIGINT),
             note="the run done, Ctrl-C while local evaluates it"))

    # -- killed or stopped actors (Ray mode)
    ray_run = lambda x, *a: local(*SMOKE, "--no-eval", "--out", str(x.out), "--name", "n", "--steps", "400",  # noqa: E731
                                  "--checkpoint-every", "20", *a)
    add(Case("ray_kill_learner", "actors", lambda x: ray_run(x), (0,), ("replacing it from the newest checkpoint",),
             during=actor("RayLearnerWorker", signal.SIGKILL), ray=True, limit_s=300, mem_gib=8))
    add(Case("ray_kill_rollout", "actors", lambda x: ray_run(x), (0,), (),
             during=actor("RolloutWorker", signal.SIGKILL), ray=True, limit_s=300, mem_gib=8))
    add(Case("ray_stop_learner", "actors", lambda x: ray_run(x, "--learner-timeout-s", "10"), (0,),
             ("--learner-timeout-s",), during=actor("RayLearnerWorker", signal.SIGSTOP), ray=True, limit_s=300,
             mem_gib=8))
    add(Case("ray_stop_rollout", "actors", lambda x: ray_run(x, "--sample-timeout-s", "10"), (0,),
             ("--sample-timeout-s",), during=actor("RolloutWorker", signal.SIGSTOP), ray=True, limit_s=300, mem_gib=8))
    add(Case("ray_stop_monitor", "actors", lambda x: ray_run(x, "--monitor-timeout-s", "8", "--learner-timeout-s",
                                                             "8"), (1,), ("monitor actor", "--monitor-timeout-s",
                                                                          "--resume"),
             during=actor("RayMonitor", signal.SIGSTOP), ray=True, limit_s=300, mem_gib=8))
    add(Case("ray_kill_monitor", "actors", lambda x: ray_run(x, "--monitor-timeout-s", "8"), (1,),
             ("monitor actor", "--resume"), during=actor("RayMonitor", signal.SIGKILL), ray=True, limit_s=300,
             mem_gib=8, note="the monitor actor dies outright (kill -9), not stopped"))
    add(Case("ray_disk_full_tmpfs", "actors", lambda x: ray_run(x, "--checkpoint-every", "5"), (1,),
             ("full", "--resume"), tmpfs("3m"), ray=True, limit_s=300, mem_gib=8,
             note="the monitor actor's checkpoint write meets a full disk"))
    add(Case("ray_sigterm_burst", "actors", lambda x: ray_run(x), (0,), ("interrupted at update",),
             during=signals(signal.SIGTERM, 3, after=6, name="n"), ray=True, limit_s=300, mem_gib=8))
    return c


# ---------------------------------------------------------------------------------------------- processes


def child_env(ctx: Ctx) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])),
           "RAY_USAGE_STATS_ENABLED": "0", "MPLBACKEND": "Agg"}
    return {**env, **ctx.env}


def _parents() -> dict[int, int]:
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    out[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return out


def tree(root: int) -> list[int]:
    """root and every process below it."""
    parents = _parents()
    kids: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        kids.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in parents or pid == root:
            found.append(pid)
            todo.extend(kids.get(pid, []))
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def started(pid: int) -> str:
    """The process's start time (/proc/PID/stat field 22): tells a process apart from a later one of its pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def kill_tree(root: int, seen: dict[int, str] | None = None) -> None:
    """SIGCONT then SIGKILL to root, what is below it now, and the processes `seen` below it before (pid: start
    time; one whose parent died is no longer below it), each only while it is still that process."""
    targets = {pid: started(pid) for pid in tree(root)} | (seen or {})
    for pid, when in targets.items():
        if pid == os.getpid() or not when or started(pid) != when:
            continue
        for sig in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


# ---------------------------------------------------------------------------------------------- checks


def snapshot(folder: Path, skip: set[Path]) -> dict[str, bytes]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p in skip or p.name == "run.lock" or p.is_symlink() or not p.is_file():
            continue
        out[p.relative_to(folder).as_posix()] = p.read_bytes()
    return out


def whole(folder: Path) -> list[str]:
    """What is wrong with a run folder's written data: diag.jsonl not each step once in order (read_diag refuses a
    damaged one), a kept checkpoint that does not read, summary.json not JSON, a `.tmp` left."""
    from actors.checkpoints import list_checkpoints, read_checkpoint
    from actors.diag_file import read_diag, step_records
    from actors.files import TMP_SUFFIX

    logging.disable(logging.WARNING)  # read_diag's warning of a torn last line is the case's output, not ours
    wrong = []
    diag = folder / "diag.jsonl"
    last = 0
    if diag.is_file() and not diag.is_symlink():
        try:
            steps = [int(r["step"]) for r in step_records(read_diag(diag))]
            last = steps[-1] if steps else 0
            if steps != list(range(1, last + 1)):
                wrong.append("diag.jsonl steps not 1..N")
        except Exception as err:  # any refusal is the finding
            wrong.append(f"diag.jsonl unreadable ({str(err)[:80]})")
    for step, path in list_checkpoints(folder):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            read_checkpoint(path, mmap=True)
        except Exception as err:
            wrong.append(f"{path.name} unreadable ({str(err)[:60]})")
        if step > last and diag.is_file():
            wrong.append(f"{path.name} past diag.jsonl's last step {last}")
    summary = folder / "summary.json"
    if summary.is_file() and not summary.is_symlink():
        try:
            json.loads(summary.read_text())
        except ValueError:
            wrong.append("summary.json not JSON")
    for sub in (folder, folder / "checkpoints"):
        left = [p.name for p in sub.glob("*" + TMP_SUFFIX) if not p.is_symlink()] if sub.is_dir() else []
        if left:
            wrong.append(f"left {left}")
    return wrong


@dataclass
class Result:
    name: str
    code: int | None = None
    traceback: bool = False
    hung: bool = False
    peak_gib: float = 0.0
    blowup: bool = False
    exit_ok: bool = True
    says_ok: bool = True
    lost: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""
    tail: str = ""


def run_case(case: Case, bases: dict[str, Path], root: Path) -> Result:
    res = Result(case.name)
    t = Path(tempfile.mkdtemp(prefix=f"{case.name}-", dir=root))
    ctx = Ctx(t, bases)
    seen: dict[int, str] = {}
    try:
        if case.setup:
            case.setup(ctx)
        before = snapshot(ctx.run, ctx.planted) if ctx.run is not None and case.folder == "untouched" else None
        log = (t / "output.txt").open("w+b")
        t0 = time.monotonic()
        proc = subprocess.Popen([PY, *case.cmd(ctx)], cwd=t, env=child_env(ctx), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=ctx.preexec)
        acting = None
        if case.during:
            import threading

            def act():
                try:
                    case.during(ctx, proc)
                except Exception as err:  # the action could not be made: say so in the row
                    res.error = f"action: {type(err).__name__}: {err}"

            acting = threading.Thread(target=act, daemon=True)
            acting.start()
        peak = 0
        while proc.poll() is None:
            pids = tree(proc.pid)
            seen.update({pid: started(pid) for pid in pids if pid not in seen})
            peak = max(peak, sum(rss(p) for p in pids))
            if peak > case.mem_gib * GIB:
                res.blowup = True
                kill_tree(proc.pid, seen)
                break
            if time.monotonic() - t0 > case.limit_s:
                res.hung = True
                kill_tree(proc.pid, seen)
                break
            time.sleep(0.1)
        proc.wait()
        res.seconds = time.monotonic() - t0
        res.code = proc.returncode
        kill_tree(proc.pid, seen)  # what a killed or stopped run left (Ray's processes)
        if acting is not None:
            acting.join(5)
        res.peak_gib = peak / GIB
        log.seek(0)
        text = log.read().decode(errors="replace")
        res.traceback = TRACEBACK in text
        res.tail = "\n".join(text.strip().splitlines()[-6:])
        res.exit_ok = not res.hung and not res.blowup and res.code in case.exit
        vars_ = {"run": str(ctx.run), "t": str(t), "out": str(ctx.out)}
        res.says_ok = all(s.format(**vars_) in text for s in case.says)
        for cleanup in ctx.cleanup:  # background writers stopped before the folders are read
            cleanup()
        ctx.cleanup.clear()
        for path, data in ctx.keep.items():
            if not path.is_file() or path.read_bytes() != data:
                res.lost.append(f"{path.name} changed")
        if before is not None:
            after = snapshot(ctx.run, ctx.planted)
            changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
            if changed:
                res.lost.append(f"changed {changed[:4]}")
        elif case.folder == "whole":
            folders = [p for p in ctx.out.glob("*/*/*") if p.is_dir() and not p.is_symlink()] + ctx.extra
            for folder in folders:
                res.lost += [f"{folder.parent.name}: {w}" for w in whole(folder)]
    except Exception as err:  # the battery's own failure, shown in the row
        res.error = res.error or f"{type(err).__name__}: {err}"
    finally:
        for cleanup in ctx.cleanup:
            with contextlib.suppress(Exception):
                cleanup()
        if seen:
            kill_tree(next(iter(seen)), seen)
        for p in t.rglob("*"):  # FIFOs and links are removed with the folder; nothing follows them
            if p.is_fifo():
                p.unlink()
        shutil.rmtree(t, ignore_errors=True)
    return res


def make_bases(root: Path) -> dict[str, Path]:
    """The runs the cases copy: a finished smoke run of 20 updates (checkpoints 10, 20) and one a rule killed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    bases = {}
    for name, extra in (("finished", ["--steps", "20"]), ("killed", ["--steps", "40", "--inject-nan-at", "7"])):
        out = root / "bases" / name
        argv = local(*SMOKE, "--serial", "--no-eval", "--out", str(out), "--name", name, "--checkpoint-every", "4",
                     "--keep-checkpoints", "2", *extra)
        if name == "finished":
            argv[argv.index("--checkpoint-every") + 1] = "10"
        code = subprocess.run([PY, *argv], env=env, capture_output=True, cwd=root).returncode
        (folder,) = out.glob(f"*/{name}/0")
        if code not in (0, 3):
            raise SystemExit(f"the base run {name} ended with exit {code}")
        (folder / "run.lock").unlink(missing_ok=True)
        bases[name] = folder
    return bases


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=None, metavar="NAME", help="run these cases (comma-separated names)")
    p.add_argument("--group", default=None, help="run the cases of these groups (comma-separated)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--no-ray", action="store_true", help="leave out the Ray-mode cases")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    args = p.parse_args(argv)
    chosen = cases()
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {c.name for c in chosen}
        if unknown:
            p.error(f"--only: no case {sorted(unknown)}; --list names them")
        chosen = [c for c in chosen if c.name in names]
    if args.group:
        chosen = [c for c in chosen if c.group in args.group.split(",")]
    if args.no_ray:
        chosen = [c for c in chosen if not c.ray]
    if args.list:
        for c in chosen:
            print(f"{c.group:<9} {c.name}{'  (ray)' if c.ray else ''}{'  ' + c.note if c.note else ''}")
        return 0
    root = Path(tempfile.mkdtemp(prefix="fault-battery-"))
    rows: list[Result] = []
    try:
        bases = make_bases(root)
        head = f"{'case':<38} {'exit':>4} {'tb':>3} {'hang':>4} {'GiB':>5} {'mem':>3} {'exp':>3} {'msg':>3} {'s':>5}"
        print(f"{head}  data")
        for case in chosen:
            r = run_case(case, bases, root)
            rows.append(r)
            flags = lambda b: "yes" if b else "-"  # noqa: E731
            print(f"{r.name:<38} {r.code if r.code is not None else '?':>4} {flags(r.traceback):>3} "
                  f"{flags(r.hung):>4} {r.peak_gib:>5.2f} {flags(r.blowup):>3} {'ok' if r.exit_ok else 'NO':>3} "
                  f"{'ok' if r.says_ok else 'NO':>3} {r.seconds:>5.1f}  {'; '.join(r.lost) or 'whole'}"
                  f"{'  [' + r.error + ']' if r.error else ''}", flush=True)
            if r.traceback or r.hung or r.blowup or r.lost or not r.exit_ok or not r.says_ok or r.error:
                print("    | " + r.tail.replace("\n", "\n    | "), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in rows], indent=1) + "\n")
    unexpected = [r.name for r in rows if not r.exit_ok or not r.says_ok or r.error]
    print(f"unexpected={len(unexpected)} {' '.join(unexpected)}")
    print(f"cases={len(rows)} tracebacks={sum(r.traceback for r in rows)} hangs={sum(r.hung for r in rows)} "
          f"memory_blowups={sum(r.blowup for r in rows)} data_loss={sum(bool(r.lost) for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
