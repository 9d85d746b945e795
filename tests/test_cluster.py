"""A real Ray cluster on loopback: `ray start --head`, `ray job submit` of the smoke preset through
`python -m foxhunt_ray.job`, job SUCCEEDED, run folder written with the upload's content hash; the monitor's
gauges on the node's metrics endpoint (what the dashboard graphs) and `ray job stop` ending a run cleanly with a
checkpoint; cluster stopped.

The cluster is started with `ray start --head --block` in its own session and stopped by signalling that process
group: `ray stop` would stop every Ray process on the machine, including other people's sessions.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from foxhunt_ray import provenance
from tests.test_network import listeners, loopback

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
UPLOAD_EXCLUDES = [".venv", "runs", "build", ".git", ".devbundle", "benchmarks/results", "**/__pycache__", "*.egg-info"]

pytestmark = pytest.mark.slow


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def ray_cli(*args: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([RAY, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster():
    if not Path(RAY).exists():
        pytest.fail(f"{RAY} not found: the ray CLI comes with ray[default] (./bootstrap)")
    gcs, dash, client, agent, agent_grpc, metrics, rte = free_ports(7)
    temp = tempfile.mkdtemp(prefix="rayc", dir="/tmp")  # short: Ray's unix socket paths must stay < 108 bytes
    # the job's `python` is the one first on the PATH of the cluster that runs it: this interpreter
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("RAY_ADDRESS", None)
    # Ray >= 2.59 enables token auth on local clusters; this cluster gets its own throwaway token, shared with
    # the CLI calls through the environment (nothing read from or written to ~/.ray)
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    # `ray job stop` waits this long after its SIGTERM before a SIGKILL (default 3 s): time for the final
    # checkpoint and summary on a loaded 2-core machine
    env["RAY_JOB_STOP_WAIT_TIME_S"] = "60"
    # the workers export their metrics (the monitor's gauges) every second, not every 10 s (Ray's default): the
    # gauges test sees them after a few updates instead of training on for ten seconds more
    env["RAY_metrics_report_interval_ms"] = "1000"
    # Ray's single-machine switch (README's recipe): every port of the cluster on 127.0.0.1, none on the network
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    log = open(Path(temp) / "head.log", "w+")  # a file, not a pipe: a full pipe would stall `ray start`
    head = subprocess.Popen(
        [RAY, "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
         f"--port={gcs}", f"--dashboard-port={dash}", f"--ray-client-server-port={client}",
         f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
         f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={rte}", "--num-cpus=2",
         f"--temp-dir={temp}", "--disable-usage-stats"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    address = f"http://127.0.0.1:{dash}"
    try:
        deadline = time.monotonic() + 90
        while ray_cli("job", "list", "--address", address, env=env, timeout=30).returncode != 0:
            if head.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"ray start --head did not come up at {address}:\n{log.read()[-3000:]}")
            time.sleep(1)
        yield address, env, metrics, head.pid
    finally:
        stop_group(head)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def stop_group(head: subprocess.Popen) -> None:
    """SIGTERM to `ray start --block` (it stops what it started), then SIGKILL to whatever of its own process
    group is left: only processes this test started."""
    head.terminate()
    try:
        head.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(head.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    head.wait(timeout=10)


def test_job_submit_runs_the_smoke_preset(cluster, tmp_path):
    address, env, *_ = cluster
    out = tmp_path / "runs"
    job_id = f"foxhunt-test-{os.getpid()}-{int(time.time())}"
    expected = provenance.content_sha()  # what the git-less upload must compute for these same files
    submit = ray_cli(
        "job", "submit", "--address", address, "--submission-id", job_id, "--working-dir", str(ROOT),
        "--runtime-env-json", json.dumps({"excludes": UPLOAD_EXCLUDES}), "--",
        "python", "-m", "foxhunt_ray.job", "--preset", "smoke", "--steps", "60", "--rollout-workers", "1",
        "--out", str(out), "--expect-code-sha", expected, "--quiet",
        env=env, timeout=300,
    )  # fmt: skip
    logs = submit.stdout + submit.stderr
    status = ray_cli("job", "status", "--address", address, job_id, env=env, timeout=60)
    said = re.sub(r"\x1b\[[0-9;]*m", "", status.stdout + status.stderr)  # the CLI colours its words
    assert f"Job '{job_id}' succeeded" in said, said + logs[-4000:]
    found = list((out / expected).glob("*/0"))  # a git-less upload is stamped with its content hash
    assert len(found) == 1, logs[-4000:]
    run_dir = found[0]
    assert (out / "latest").resolve() == run_dir.resolve()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "done" and summary["step"] == 60 and summary["code_sha"] == expected
    lines = [json.loads(x) for x in (run_dir / "diag.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == list(range(1, 61))
    assert (run_dir / "checkpoints" / "ckpt_00000060.pt").is_file()


def job_status(address: str, job_id: str, env: dict) -> str:
    said = ray_cli("job", "status", "--address", address, job_id, env=env, timeout=60)
    return re.sub(r"\x1b\[[0-9;]*m", "", said.stdout + said.stderr)


def test_monitor_gauges_are_exported_and_job_stop_keeps_a_checkpoint(cluster, tmp_path):
    import urllib.request

    address, env, metrics, head_pid = cluster
    out = tmp_path / "runs"
    job_id = f"foxhunt-gauges-{os.getpid()}-{int(time.time())}"
    submit = ray_cli(
        "job", "submit", "--no-wait", "--address", address, "--submission-id", job_id, "--working-dir", str(ROOT),
        "--runtime-env-json", json.dumps({"excludes": UPLOAD_EXCLUDES}), "--",
        "python", "-m", "foxhunt_ray.job", "--preset", "smoke", "--steps", "100000", "--rollout-workers", "1",
        "--fold", "7", "--name", "gauges", "--out", str(out), "--quiet",
        env=env, timeout=120,
    )  # fmt: skip
    assert submit.returncode == 0, submit.stdout + submit.stderr
    wanted = {f"ray_foxhunt_{name}" for name in ("qpa", "qpa_ema", "pnl_cum_usd", "l_c51", "l_dueling")}
    seen: set[str] = set()
    diag = out / provenance.content_sha() / "gauges" / "7" / "diag.jsonl"
    deadline = time.monotonic() + 150
    while not (wanted <= seen and diag.is_file() and len(diag.read_bytes().splitlines()) >= 5):
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)  # the job trains on both cores until it is stopped: looked at often, it is stopped sooner
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read().decode()
        except OSError:
            continue
        # this run's gauges only: they are tagged with the run, <code_sha>/<name>/<fold> (the job's content hash)
        tag = f'run="{provenance.content_sha()}/gauges/7"'
        ours = [line for line in text.splitlines() if line.startswith("ray_foxhunt_") and tag in line]
        seen |= {line.split("{")[0] for line in ours}
    # while the job runs: the head's processes (GCS, raylet, agents, the workers, the job's driver) listen on
    # loopback only (docs/running.md, "What listens on the network")
    exposed = [row for row in listeners(head_pid) if not loopback(row["address"])]
    stop = ray_cli("job", "stop", "--address", address, job_id, env=env, timeout=120)
    assert not exposed, f"the cluster listens beyond loopback: {exposed}"
    assert wanted <= seen, f"gauges missing: {sorted(wanted - seen)}; {job_status(address, job_id, env)}"
    deadline = time.monotonic() + 90
    while "STOPPED" not in (said := job_status(address, job_id, env)).upper() and time.monotonic() < deadline:
        time.sleep(1)
    (run_dir,) = out.glob("*/*/7")
    logs = ray_cli("job", "logs", "--address", address, job_id, env=env, timeout=60)
    assert (run_dir / "summary.json").is_file(), (sorted(p.name for p in run_dir.iterdir()), said, logs.stdout[-3000:])
    summary = json.loads((run_dir / "summary.json").read_text())
    # `ray job stop` sends SIGTERM: the driver treats it as Ctrl-C, the monitor writes "stopped" at the last step
    assert summary["status"] == "stopped", (summary, said, stop.stdout + stop.stderr)
    lines = [json.loads(x) for x in (run_dir / "diag.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == list(range(1, summary["step"] + 1))
    # the driver says why it kept none ("interrupted: no final checkpoint (...)") in the job's logs
    kept = list((run_dir / "checkpoints").glob("ckpt_*.pt"))
    why = [line for line in (logs.stdout + logs.stderr).splitlines() if "interrupted" in line]  # short: pytest shows it
    assert kept, ("no checkpoint kept on ray job stop", why, logs.stdout[-3000:])
