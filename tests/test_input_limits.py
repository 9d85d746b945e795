"""Issue 14, classes 3, 4 and 6: unbounded input is refused before it is allocated, malformed zips and bad
payloads end in a named error (no traceback, no hang), and the content hash covers every source
(docs/input-limits.md)."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from actors import wire
from actors.rollout import RolloutWorker
from foxhunt_ray import provenance
from lobsim_env.lobster import files, reconstruct
from lobsim_env.lobster.files import LobsterFormatError, load_day
from tests.test_driver import run, summary
from tests.test_lobster import BOOK, MESSAGES, STEM

MSG = ("\n".join(MESSAGES) + "\n").encode()
OB = ("\n".join(BOOK) + "\n").encode()


def _zip(folder: Path, *, method=zipfile.ZIP_DEFLATED, edit=None, book: bytes = OB) -> Path:
    """A LOBSTER zip of the test day; edit(zf) may change the ZipInfos before the directory is written."""
    path = folder / "LOBSTER_SampleFile_TEST_2012-06-21_2.zip"
    zf = zipfile.ZipFile(path, "w", method)
    zf.writestr(f"{STEM}_message_2.csv", MSG)
    zf.writestr(f"{STEM}_orderbook_2.csv", book)
    if edit is not None:
        edit(zf)
    zf.close()
    return path


def _claim(size: int):
    def edit(zf: zipfile.ZipFile) -> None:
        zf.filelist[1].file_size = size  # the directory lies: the local header and the stream are unchanged

    return edit


def _both_paths(monkeypatch, fast: bool) -> None:
    monkeypatch.setattr(files, "_fast_inflate", lambda: fast and files._C is not None)


@pytest.mark.parametrize("fast", [True, False])
def test_a_member_claiming_a_pebibyte_is_refused_before_any_allocation(tmp_path, monkeypatch, fast):
    _both_paths(monkeypatch, fast)
    path = _zip(tmp_path, edit=_claim(2**50))
    with pytest.raises(LobsterFormatError) as err:
        load_day(path)  # main: MemoryError (np.empty of 1 PiB) with a traceback
    msg = str(err.value)
    assert str(path) in msg and "_orderbook_2.csv" in msg and "1,125,899,906,842,624 bytes" in msg
    assert files.MAX_BYTES_ENV in msg and "free memory" in msg


def test_the_limit_follows_the_machine_and_the_override(tmp_path, monkeypatch):
    path = _zip(tmp_path)
    monkeypatch.setattr(files, "available_memory", lambda: 8 * len(OB + MSG) - 8)  # one byte short
    with pytest.raises(LobsterFormatError, match=r"over the \d[\d,]* bytes this machine can load \(0.5 of the"):
        load_day(path)
    monkeypatch.setenv(files.MAX_BYTES_ENV, str(len(OB + MSG)))
    assert load_day(path).n_messages == len(MESSAGES)
    monkeypatch.setenv(files.MAX_BYTES_ENV, "100")
    with pytest.raises(LobsterFormatError, match=r"FOXHUNT_LOBSTER_MAX_BYTES=100\)"):
        load_day(path)
    csv = tmp_path / f"{STEM}_message_2.csv"
    csv.write_bytes(MSG * 20)
    with pytest.raises(LobsterFormatError, match=r"_message_2.csv: the file is \d[\d,]* bytes"):
        load_day(csv)  # a CSV is measured before it is read too


def test_a_zip_bomb_is_refused_by_its_ratio(tmp_path, monkeypatch):
    monkeypatch.setenv(files.MAX_BYTES_ENV, str(2**40))  # the size alone would pass here
    path = _zip(tmp_path, book=OB[:1] * (40 * 2**20))  # 40 MiB of one byte: deflates about 1000 times
    with pytest.raises(LobsterFormatError, match=r"zip bomb") as err:
        load_day(path)
    assert "_orderbook_2.csv" in str(err.value)


@pytest.mark.parametrize("fast", [True, False])
def test_a_member_that_holds_more_than_it_declares_is_damaged_not_read_whole(tmp_path, monkeypatch, fast):
    _both_paths(monkeypatch, fast)
    path = _zip(tmp_path, edit=_claim(len(OB) // 2))
    with pytest.raises(LobsterFormatError, match=r"member '.*_orderbook_2.csv' is damaged"):
        load_day(path)


def _bad_crc(tmp_path: Path) -> Path:
    path = _zip(tmp_path, method=zipfile.ZIP_STORED)
    raw = bytearray(path.read_bytes())
    raw[raw.index(OB[:20]) + 5] ^= 0x01
    path.write_bytes(bytes(raw))
    return path


def _encrypted(tmp_path: Path) -> Path:
    return _zip(tmp_path, edit=lambda zf: setattr(zf.filelist[0], "flag_bits", zf.filelist[0].flag_bits | 1))


def _unsupported(tmp_path: Path) -> Path:
    return _zip(tmp_path, edit=lambda zf: setattr(zf.filelist[1], "compress_type", 98))  # PPMd


def _folder(tmp_path: Path) -> Path:
    path = tmp_path / "LOBSTER_SampleFile_TEST_2012-06-21_2.zip"
    path.mkdir()
    return path


def _not_a_zip(tmp_path: Path) -> Path:
    path = tmp_path / "LOBSTER_SampleFile_TEST_2012-06-21_2.zip"
    path.write_bytes(b"PK\x03\x04 truncated")
    return path


@pytest.mark.parametrize(
    "make, says",
    [
        (_bad_crc, r"is damaged \(BadZipFile: Bad CRC-32"),
        (_encrypted, r"is encrypted"),
        (_unsupported, r"compression method 98"),
        (_folder, r"a folder, not a file"),
        (_not_a_zip, r"not a readable zip archive"),
    ],
)
def test_malformed_zips_exit_2_with_the_error_named(tmp_path, capsys, make, says):
    path = make(tmp_path)
    with pytest.raises(LobsterFormatError, match=says):
        load_day(path)
    assert reconstruct.main([str(path)]) == 2  # main: exit 1 with a traceback (BadZipFile, RuntimeError, ...)
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and str(path) in err


def test_day_text_bytes_reads_only_the_directory(tmp_path):
    assert files.day_text_bytes(_zip(tmp_path, edit=_claim(2**50))) == 2**50 + len(MSG)
    assert files.day_text_bytes(tmp_path / "missing.zip") == 0


# ------------------------------------------------------------------------------------------- provenance (6)


def test_the_content_hash_covers_c_and_cuda_sources_not_build_outputs(tmp_path):
    tree = tmp_path / "tree"
    for name in ("cuda", "lobsim_env"):
        shutil.copytree(provenance.REPO_ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(provenance.REPO_ROOT / "pyproject.toml", tree)
    first = provenance.content_sha(tree)
    covered = {p.relative_to(tree).as_posix() for p in provenance.code_files(tree)}
    assert {"cuda/kernels/foxhunt_common.cuh", "lobsim_env/lobster/_lobster_fast.c", "pyproject.toml"} <= covered
    for rel in (
        "cuda/kernels/foxhunt_common.cuh",
        "lobsim_env/lobster/_lobster_fast.c",
        "cuda/kernels/foxhunt_kernels.h",
    ):
        f = tree / rel
        before = f.read_bytes()
        f.write_bytes(before + b"\n// edited\n")
        assert provenance.content_sha(tree) != first, rel  # main: a changed .cuh or .c kept the stamp
        f.write_bytes(before)
    assert provenance.content_sha(tree) == first
    (tree / "lobsim_env" / "_x.so").write_bytes(b"\x7fELF built")  # a build output: not hashed
    assert provenance.content_sha(tree) == first


def test_every_tracked_source_in_the_code_folders_is_hashed():
    if shutil.which("git") is None or provenance.git_sha() is None:
        pytest.skip("no git checkout")
    import subprocess

    out = subprocess.run(
        ["git", "-C", str(provenance.REPO_ROOT), "ls-files", *provenance.CODE_DIRS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    docs = {".md", ".txt", ".json", ".sh", ""}
    sources = {p for p in out if Path(p).suffix not in docs and (provenance.REPO_ROOT / p).is_file()}
    hashed = {p.relative_to(provenance.REPO_ROOT).as_posix() for p in provenance.code_files()}
    assert sources <= hashed, sorted(sources - hashed)




# --------------------------------------------------------------------------------------------- bad payloads (4)


def _sampling(monkeypatch, edit, limit: int = 400) -> list[int]:
    """RolloutWorker.sample with `edit(payload, call)` applied; raises after `limit` calls (main looped forever)."""
    real = RolloutWorker.sample
    calls = [0]

    def sample(self, n_steps=None):
        calls[0] += 1
        if calls[0] > limit:
            raise RuntimeError(f"still sampling after {limit} payloads: the run did not end on them")
        return edit(real(self, n_steps), calls[0])

    monkeypatch.setattr(RolloutWorker, "sample", sample)
    return calls


def test_a_run_whose_every_payload_is_bad_ends_with_the_faults_counted(tmp_path, monkeypatch, capsys, caplog):
    calls = _sampling(monkeypatch, lambda p, i: p[:-8] if i % 2 else np.zeros(64, np.uint8))
    with caplog.at_level("WARNING", logger="actors.wire"):
        code, run_dir = run(tmp_path, "--steps", "20")
    assert code == 1 and calls[0] == wire.MAX_BAD_IN_A_ROW  # main: sampled forever (here: raised after 400)
    s = summary(run_dir)
    assert s["status"] == "error" and "no good rollout payload in the last 64" in s["message"]
    assert "32 x bad rollout payload" in s["message"] and "truncated" in s["message"]
    err = capsys.readouterr().err
    assert "error: no good rollout payload" in err and "Traceback" not in err
    # a few kinds of fault (no magic; truncated in one array or another), each logged once and again at its 10th
    assert len([r for r in caplog.records if r.name == "actors.wire"]) <= 6  # not 64 lines


def test_a_payload_the_learner_refuses_mid_run_is_counted_and_the_run_goes_on(tmp_path, monkeypatch):
    def refuse_every_third(payload, i):
        if i % 3:
            return payload
        b = wire.decode(bytes(payload))
        b = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in b.items() if k != "wire_version"}
        b["actions"][0, 0] = 99  # decodes, but no action of this market
        return wire.encode(b)

    _sampling(monkeypatch, refuse_every_third)
    code, run_dir = run(tmp_path, "--steps", "12")
    assert code == 0 and summary(run_dir)["status"] == "done"
    assert summary(run_dir)["last"]["bad_payloads"] >= 4


def test_starved_bounds_by_count_and_by_time():
    d = wire.PayloadDecoder()
    d.count_bad("x 1")
    assert d.starved(now=d.bad_since + 1e6) is None  # one bad payload is never a streak
    d.count_bad("x 2")
    assert d.starved(now=d.bad_since + 1) is None
    assert "no good rollout payload in the last 2" in d.starved(now=d.bad_since + wire.MAX_BAD_SECONDS)
    assert "2 x bad rollout payload: x 1" in d.summary()  # one kind: numbers do not make a new kind
    d.good()
    assert d.starved() is None and d.bad_payloads == 2


# ------------------------------------------------------------------------------------ config sizes (3)


def test_a_config_that_cannot_fit_is_refused_before_the_run_folder(tmp_path, capsys):
    for flag, says in (
        ("learner.hidden_dim=200000", r"at most about learner.hidden_dim=\d+ fits"),
        ("rollout.num_envs=100000000", r"at most about rollout.num_envs=\d+ fits"),
        ("learner.replay_capacity=100000000000", r"at most about learner.replay_capacity=\d+ fits"),
    ):
        code, _ = run(tmp_path, "--steps", "2", "--set", flag)
        err = capsys.readouterr().err
        assert code == 1 and "of memory, this machine has" in err, (flag, err)  # main: allocated, or crashed
        assert re.search(says, err) and "Traceback" not in err, (flag, err)
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("config.json"))


def test_a_payload_over_the_wire_limits_is_refused_by_the_config(tmp_path, capsys):
    code, _ = run(tmp_path, "--steps", "2", "--set", "rollout.num_envs=2000000", "--set", "rollout.steps_per_sample=64")
    err = capsys.readouterr().err
    assert code == 1 and "over the wire's" in err and "every payload would be dropped" in err
