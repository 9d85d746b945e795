"""Issue 15: `--storage s3://...` against an S3 server on this machine (moto's, on 127.0.0.1, nothing else reached):
a run mirrored there, read back, resumed and reported from its s3:// URI; diag.jsonl's new lines appended to the
object once it is 5 MiB (s3fs copies the object on the server and uploads the new bytes only); the storage
folder's claim. Optional: s3fs and moto[server] are not the project's dependencies (`pip install s3fs moto[server]`
with s3fs at the installed fsspec's version); without them the tests are skipped, saying so."""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path

import pytest

s3fs = pytest.importorskip("s3fs", reason="optional: s3:// needs s3fs (pip install s3fs moto[server])")
moto_server = pytest.importorskip(
    "moto.server", reason="optional: the local S3 server is moto's (pip install 'moto[server]')"
)

from foxhunt_ray import driver, report  # noqa: E402
from foxhunt_ray.run_folder import RunLock  # noqa: E402
from foxhunt_ray.storage import APPENDS, RunStorage, StorageClaimError  # noqa: E402
from tests.test_storage_sync import Meter, line, new_run, stored  # noqa: E402

SMOKE = ["--preset", "smoke", "--serial", "--quiet", "--checkpoint-interval-s", "0"]


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    """s3://<a new bucket> on a moto server at 127.0.0.1, the AWS settings of this process pointed at it only."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    s3fs.S3FileSystem.clear_instance_cache()
    name = f"foxhunt-{os.getpid()}-{port}"
    s3fs.S3FileSystem().mkdir(name)
    try:
        yield f"s3://{name}"
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        server.stop()


def steps(run_dir: Path) -> list[int]:
    lines = [json.loads(x) for x in (run_dir / "diag.jsonl").read_text().splitlines()]
    return [r["step"] for r in lines if "event" not in r]


def files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "run.lock"
    }


def test_a_run_mirrored_to_s3_is_read_back_resumed_and_reported_from_its_uri(bucket, tmp_path):
    root = f"{bucket}/runs"
    out = tmp_path / "runs"
    flags = ["--steps", "30", "--checkpoint-every", "10", "--name", "on-s3", "--storage", root]
    assert driver.main([*SMOKE, "--out", str(out), *flags]) == 0
    (run_dir,) = out.glob("*/on-s3/0")
    uri = f"{root}/{run_dir.parents[1].name}/on-s3/0"
    store = RunStorage(root, "/".join(run_dir.parts[-3:]))
    assert store.url == uri
    mirrored = tmp_path / "mirrored"
    store.fetch(mirrored)
    assert files(mirrored) == files(run_dir)  # checkpoint 10 pruned there too, no temporary names
    assert sorted(p.name for p in (mirrored / "checkpoints").iterdir()) == ["ckpt_00000020.pt", "ckpt_00000030.pt"]

    elsewhere = tmp_path / "elsewhere"
    assert driver.main(["--resume", uri, "--steps", "40", "--serial", "--quiet", "--out", str(elsewhere)]) == 0
    again = tmp_path / "again"
    RunStorage(root, "/".join(run_dir.parts[-3:])).fetch(again)
    assert steps(again) == list(range(1, 41)) and steps(elsewhere / run_dir.relative_to(out)) == list(range(1, 41))
    loaded = report.load_run(uri)
    assert loaded.last_step == 40 and loaded.status == "done"


def test_s3_appends_diag_jsonl_from_5_mib_and_keeps_the_claim(bucket, tmp_path, monkeypatch):
    assert APPENDS["s3"] == 5 * 2**20
    rel = "c0de/big/0"
    local = tmp_path / "runs" / rel
    lock = new_run(local)
    diag = local / "diag.jsonl"
    big, step = [], 0
    while sum(map(len, big)) < 5 * 2**20 + 1000:
        step += 1
        big.append(line(step))
    diag.write_bytes(b"".join(big) + line(step + 1)[:25])  # and a torn line, left out
    store = RunStorage(f"{bucket}/runs", rel)
    meter = Meter(store.fs, monkeypatch)
    store.sync(local)
    assert stored(store) == b"".join(big)
    for _ in range(3):
        before = meter.bytes
        with open(diag, "ab") as f:
            f.write(line(step + 1)[25:] + line(step + 2) + line(step + 3)[:25])  # the torn one made whole, and one
        step += 2
        sent = store.sync(local)
        whole = diag.read_bytes()[: diag.read_bytes().rfind(b"\n") + 1]
        assert stored(store) == whole and sent == meter.bytes - before < 1000  # the new lines, not 5 MiB again

    other = tmp_path / "other" / rel
    other_lock = RunLock.acquire(other)
    with pytest.raises(StorageClaimError, match=f"{store.url} is claimed by another driver"):
        RunStorage(f"{bucket}/runs", rel).sync(other)
    lock.release()
    other_lock.release()
