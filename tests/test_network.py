"""What a local run exposes on the network: `python -m foxhunt_ray.local` starts a Ray instance of its own whose
every listening socket is on loopback (issue 14, class 2). Ray's processes are listed from /proc, the run's process
tree only (other Ray instances on the machine are not looked at)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, sys.argv[1])
    from tests.test_network import listeners
    from foxhunt_ray import local
    local._ray_init()
    import ray

    @ray.remote
    class Echo:
        def ping(self):
            return 1

    echo = Echo.remote()
    ray.get(echo.ping.remote())
    time.sleep(3)  # the dashboard's agents open their ports after start-up
    print(json.dumps({"listeners": listeners(os.getpid()), "node_ip": ray.util.get_node_ip_address()}))
    ray.shutdown()
    """
)


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
def test_a_local_run_listens_on_loopback_only_and_joins_no_running_cluster():
    # RAY_ADDRESS points at a cluster that is not there: plain ray.init() would try to join it and fail
    env = {**__import__("os").environ, "RAY_ADDRESS": "127.0.0.1:1"}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["node_ip"] == "127.0.0.1"
    found = report["listeners"]
    assert {"gcs_server", "raylet"} <= {row["process"] for row in found}, found
    exposed = [row for row in found if not loopback(row["address"])]
    assert not exposed, f"listening beyond loopback: {exposed}"
    assert "starts its own Ray on this machine" in done.stderr
