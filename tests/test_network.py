"""What a local run exposes on the network: `python -m foxhunt_ray.local` starts a Ray instance of its own whose
every listening socket is on loopback (issue 14, class 2). Ray's processes are listed from /proc, the run's process
tree only (other Ray instances on the machine are not looked at). The same run's log has no error-level line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

def _tree(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    seen, todo = set(), [root]
    while todo:
        pid = todo.pop()
        seen.add(pid)
        todo += children.get(pid, [])
    return seen


def _address(hex_addr: str) -> str:
    ip_hex, port_hex = hex_addr.split(":")
    raw = bytes.fromhex(ip_hex)
    if len(raw) == 4:
        ip = ".".join(str(b) for b in raw[::-1])
    else:  # /proc/net/tcp6: four little-endian 32-bit words
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        ip = ":".join(words[i : i + 2].hex() for i in range(0, 16, 2))
    return f"{ip}:{int(port_hex, 16)}"


def listeners(root: int) -> list[dict]:
    """Listening TCP sockets of process `root` and its descendants: [{"address", "process"}]."""
    inodes: dict[str, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                inodes[fields[9]] = _address(fields[1])
    out = []
    for pid in _tree(root):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = fd.readlink().name
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                out.append({"address": inodes[target[8:-1]], "process": comm})
    return out


def loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0]
    return host.startswith("127.") or host in (
        "0000:0000:0000:0000:0000:0000:0000:0001",  # ::1
    ) or host.startswith("0000:0000:0000:0000:0000:ffff:7f")  # ::ffff:127.x.x.x


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="lists sockets from Linux's /proc")
def test_a_local_run_listens_on_loopback_only_joins_no_cluster_and_logs_no_error_level_line(tmp_path):
    """The README's first command, shortened, with RAY_ADDRESS pointing at a cluster that is not there (plain
    ray.init() would try to join it and fail): it starts a Ray of its own and says so; every socket its process
    tree listens on while it runs (looked at every 0.2 s: GCS, raylet, the dashboard and its agents, the actors) is
    on loopback. And its log, what a new user reads first: Ray logged an error-level line for every run ("Actor ...
    has constructor arguments in the object store and max_restarts > 0", the rollout actors' weights) and a
    warning that token authentication was turned on. The weights now come with each sample call (restarts:
    tests/test_faults_ray.py) and local sets RAY_AUTH_MODE=token, what Ray picks, itself. A process of its own:
    Ray logs the first line once a process."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    env["RAY_ADDRESS"] = "127.0.0.1:1"
    cmd = [sys.executable, "-m", "foxhunt_ray.local", "--preset", "smoke", "--steps", "30", "--rollout-workers", "2",
           "--no-eval", "--quiet", "--out", str(tmp_path / "runs")]  # fmt: skip
    found: dict[tuple[str, str], None] = {}
    with open(tmp_path / "log", "w+") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            while proc.poll() is None:
                found.update(dict.fromkeys((row["process"], row["address"]) for row in listeners(proc.pid)))
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)
        log.seek(0)
        text = log.read()
    assert proc.returncode == 0, text[-3000:]
    assert "starts its own Ray on this machine" in text, text[-3000:]
    assert {"gcs_server", "raylet"} <= {process for process, _ in found}, found
    exposed = [(process, address) for process, address in found if not loopback(address)]
    assert not exposed, f"listening beyond loopback: {exposed}"
    assert "constructor arguments in the object store" not in text, text[-3000:]
    assert not re.search(r"^\[[^\]]* E \d+ \d+\]", text, re.M), text[-3000:]  # Ray's own error-level lines
    assert "Token authentication is enabled" not in text, text[-3000:]
    run_dir = next((tmp_path / "runs").glob("*/*/0"))
    assert json.loads((run_dir / "summary.json").read_text())["step"] == 30
