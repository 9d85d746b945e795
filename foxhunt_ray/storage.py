"""Where a run is kept beyond the driver's disk: `--storage ROOT`, a local path or a filesystem URI, the way Ray
Train's `storage_path` is.

Every file of a run is written into its folder on the driver's node, OUT/<code_sha>/<name>/<fold>/ (the
learner's checkpoints reach it through Ray's object store: foxhunt_ray.remote), whatever node the learner runs on.
With `--storage ROOT` the folder is also copied to ROOT/<code_sha>/<name>/<fold>/ (the same path below the root):
once when the run starts, after each checkpoint and when it ends (`RunStorage.sync`: the files changed since the
last copy; the checkpoints the run folder no longer keeps are removed there too). `--resume`,
`python -m foxhunt_ray.evaluate` and `python -m foxhunt_ray.report` take such a URI as RUN_DIR and read the run
back from it (`RunStorage.fetch`).

ROOT is anything fsspec opens (a declared dependency, which torch brings too): a local path (an NFS mount, another
disk), `file://...`, or an object store with its fsspec plugin installed on the driver's node (`s3://` needs s3fs,
`gs://` gcsfs, `abfs://` adlfs), the role pyarrow.fs plays in Ray Train. A file is copied whole: on a filesystem
with a rename, to a temporary name first and then renamed, so a reader never sees half a file; on an object store
a put is whole or nothing. diag.jsonl, which only grows, is the exception (`APPENDS`): its new whole lines are
appended to the copy there, never a torn last line, where the filesystem appends (a local path, memory://, s3://
from 5 MiB on); elsewhere it is rewritten whole like the other files. Only the driver's node touches ROOT.

The run folder's lock (foxhunt_ray.run_folder) guards the local copy; the storage folder has a claim of its own
(`OWNER_FILE`, read by foxhunt_ray.storage_claim: the run token of the driver copying there, written at its first
copy and read back before each copy): a driver that finds another driver's token there does not copy
(StorageClaimError, naming the holder and the fix). A resume takes the claim over from the run it continues, so the
last driver to resume a URI holds it and the one it replaced stops copying at its next copy; but not while that run
goes on (`check_resumable`: its run folder's lock held on this host, or no summary.json written there since it
claimed), and a local storage copy resumed by its path goes the same way (`stored_copy_uri`), never as a run folder
of its own. No copy or fetch writes through a symbolic link planted at a temporary name. fsspec has no atomic
create-if-absent on object stores, so the claim is a write and a read-back, not a lock: it keeps a second driver
from copying over a run that another one writes (a fresh run under a taken name, a run resumed twice), but two
drivers that claim one folder within the same moment can both pass the first check, and one copy of the loser's may
land before it stops.
"""

from __future__ import annotations

import atexit
import datetime
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath

from actors.checkpoints import CHECKPOINT_DIR, KEEP_CHECKPOINTS, Checkpoint, write_checkpoint
from actors.diag_file import DIAG_FILE
from actors.files import MAX_TEXT_BYTES, TMP_SUFFIX, write_atomic
from actors.monitor import SUMMARY_FILE
from foxhunt_ray.run_folder import CONFIG_FILE, LOCK_FILE, RunFolderError, RunLock, read_config_doc
from foxhunt_ray.storage_claim import OWNER_FILE, claimant, json_doc, local_doc, lock_held, run_token
from lobsim_env.validation import InputError

RUN_DEPTH = 3
"""A run's folder below a runs root or a storage root: <code_sha>/<name>/<fold>."""
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
PLUGINS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "abfs": "adlfs", "az": "adlfs"}
"""fsspec's plugin package per protocol, named in the error when it is missing."""
APPENDED = (DIAG_FILE,)
"""Run files that only grow by whole lines (a resume may cut them back): their copy gets the new lines appended."""
APPENDS = {"file": 0, "local": 0, "memory": 0, "s3": 5 * 2**20, "s3a": 5 * 2**20}
"""Protocols whose fsspec filesystem appends (`open(path, "ab")`), and the size of the copy from which an append
sends only the new bytes. LocalFileSystem opens the file for append; MemoryFileSystem writes at the end of the
stored file; s3fs's S3File in "ab" copies the object on the server (upload_part_copy) and uploads the new bytes,
committed whole at close, but below 5 MiB (S3's least multipart part) it downloads the object and uploads it again,
which costs more than a put of the whole file, so below that it is rewritten. gcsfs ignores "a" (it overwrites:
fsspec/gcsfs#533), adlfs is untested here: every other protocol gets the file rewritten whole."""
_TAIL = 4096  # bytes of a copy compared with the local file before new lines are appended to it
_CHUNK = 1 << 20


class StorageError(InputError):
    """A storage root or run URI that cannot be used; the message names it and the fix."""


class StorageClaimError(StorageError):
    """The run's storage folder is claimed by another driver (OWNER_FILE there): this run does not copy there."""


def is_uri(text: str | Path) -> bool:
    """Whether text is a URI (scheme://...) rather than a local path."""
    return isinstance(text, str) and bool(_SCHEME.match(text))


def split_run_uri(uri: str) -> tuple[str, str]:
    """(storage root, <code_sha>/<name>/<fold>) of a run's URI."""
    scheme, _, rest = uri.partition("://")
    parts = rest.rstrip("/").split("/")
    if len(parts) <= RUN_DEPTH or not all(parts[-RUN_DEPTH:]):
        raise StorageError(
            f"{uri} is not a run's folder in a storage root: pass ROOT/<code_sha>/<name>/<fold> (what the run printed "
            "as its storage)"
        )
    return f"{scheme}://{'/'.join(parts[:-RUN_DEPTH])}", "/".join(parts[-RUN_DEPTH:])


def root_of(text: str) -> str:
    """A --storage value as a root fsspec opens on any process of the driver's node: a URI as given, a local path
    made absolute (actors do not share the driver's working directory)."""
    return text.rstrip("/") if is_uri(text) else str(Path(text).absolute())


def check_root(text: str, *, write: bool = True) -> str | None:
    """None when ROOT can be opened and, with `write`, written (made if missing, a probe file written and
    removed), else the error naming it and the fix: checked before the run starts, as Ray Train checks its
    storage_path."""
    try:
        fs, path = _open(root_of(text))
        if not write:
            return None
        fs.makedirs(path, exist_ok=True)
        probe = f"{path}/.foxhunt-storage-probe-{os.getpid()}"
        fs.pipe_file(probe, b"ok")
        fs.rm_file(probe)
    except StorageError as err:
        return str(err)
    except (OSError, ValueError, NotImplementedError) as err:
        return f"--storage={text}: cannot write there ({type(err).__name__}: {err}); pass a folder or URI you can write"
    return None


def _open(root: str):
    """(fsspec filesystem, path within it) of a root; StorageError naming a missing plugin or an unknown scheme."""
    try:
        import fsspec
    except ImportError:  # torch depends on fsspec, so a working install has it
        raise StorageError("--storage needs fsspec (pip install fsspec)") from None
    protocol = root.partition("://")[0] if is_uri(root) else "file"
    try:
        return fsspec.core.url_to_fs(root)
    except ImportError as err:
        package = PLUGINS.get(protocol, f"the fsspec plugin for {protocol}://")
        raise StorageError(f"--storage={root}: {protocol}:// needs {package} on the driver's node ({err})") from None
    except ValueError as err:
        raise StorageError(
            f"--storage={root}: {err}; pass a local path or a URI fsspec knows (file://, s3://, ...)"
        ) from None


def _is_copied(rel: str) -> bool:
    """Whether a run folder's file goes to storage: all but the lock, the claim (written by the claim itself) and
    temporary files."""
    name = rel.rsplit("/", 1)[-1]
    return name not in (LOCK_FILE, OWNER_FILE) and not name.endswith(TMP_SUFFIX)


def stored_copy_uri(path: str | Path) -> str | None:
    """The file:// URI of a local folder that is a run's --storage copy (ROOT/<code_sha>/<name>/<fold> of a local
    ROOT), None for any other folder. A copy holds no run.lock (sync never copies it; the driver that writes a
    run folder makes one first) and either sits where its config.json's driver.storage puts the run's copy, or
    holds the storage claim (OWNER_FILE) of a driver whose run folder is another folder. A resume takes such a
    folder through its claim, as `--resume URI` does (take_stored_run), never as a run folder of its own."""
    folder = Path(path)
    if os.path.lexists(folder / LOCK_FILE) or not folder.is_dir():
        return None
    here = folder.resolve()
    if len(here.parts) <= RUN_DEPTH:
        return None
    claim = json_doc(local_doc(folder / OWNER_FILE))
    elsewhere = bool(claim) and claim.get("run_folder") != str(here)
    try:
        root = ((read_config_doc(folder, missing_ok=True) or {}).get("driver") or {}).get("storage")
    except RunFolderError:
        root = None
    if isinstance(root, str) and root.startswith("file://"):
        root = root[len("file://") :]
    at_storage = isinstance(root, str) and not is_uri(root) and Path(root).resolve() == here.parents[RUN_DEPTH - 1]
    return f"file://{here}" if elsewhere or at_storage else None


def take_stored_run(uri: str, out: str | Path) -> tuple[RunLock, Path, str, str]:
    """A resume from a run's storage (a URI, or stored_copy_uri of its path): its claim checked first
    (RunStorage.check_resumable: refused while the run that claimed it goes on, nothing changed), then the
    local folder OUT/<code_sha>/<name>/<fold> locked and the stored run copied into it, unless that folder is
    the claimant's own run folder (a run on this host that has ended: it is newer than its copy, which is left
    as it is). The run's first copy there takes the claim over (RunStorage._claim). Returns (the lock, the local
    folder, the storage root, what was done, in words)."""
    root, rel = split_run_uri(uri)
    store = RunStorage(root, rel)
    store.check_resumable()
    local = Path(out) / rel
    lock = RunLock.acquire(local)
    try:
        there = store._owner() or {}
        seen = json_doc(local_doc(local / OWNER_FILE)) or {}
        if there.get("token") and seen.get("token") == there["token"] and there.get("run_folder") == str(
            local.resolve()
        ):
            told = f"resuming {local}, the run folder that {uri} is a copy of (newer than the copy: nothing copied)"
        else:
            told = f"copied {len(store.fetch(local))} files of {uri} into {local}"
    except BaseException:
        lock.release()
        raise
    return lock, local, root, told


def _whole_end(f, size: int) -> int:
    """The offset just after the last newline of the open file f of `size` bytes (0 when it has none)."""
    pos = size
    while pos > 0:
        step = min(64 * 1024, pos)
        f.seek(pos - step)
        found = f.read(step).rfind(b"\n")
        if found >= 0:
            return pos - step + found + 1
        pos -= step
    return 0


def _tail(f, end: int) -> bytes:
    """The last _TAIL bytes of f before `end`."""
    start = max(end - _TAIL, 0)
    f.seek(start)
    return f.read(end - start)


class RunStorage:
    """One run's folder in a storage root: ROOT/<code_sha>/<name>/<fold>. `sync(local)` copies what changed,
    `fetch(local)` copies it back."""

    def __init__(self, root: str, rel: str | PurePosixPath):
        self.root = root_of(root)
        self.rel = PurePosixPath(rel).as_posix()
        self.fs, base = _open(self.root)
        self.path = f"{base.rstrip('/')}/{self.rel}"
        self.url = f"{self.root}/{self.rel}"
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self._renames = "file" in protocols
        minimum = [APPENDS[p] for p in protocols if p in APPENDS]
        self._append_from = min(minimum) if minimum else None  # None: this filesystem cannot append
        self._sent: dict[str, tuple[int, int]] = {}  # rel path -> (size, mtime_ns) as copied by this object
        self._lines: dict[str, tuple[int, bytes]] = {}  # APPENDED rel path -> (bytes copied, sha256 of their tail)
        self.lost: str | None = None  # why this run may not copy there (StorageClaimError), once found
        self.seconds = {"sync_s": 0.0, "synced_bytes": 0.0, "syncs": 0.0}

    @classmethod
    def of_run(cls, root: str, run_dir: str | Path) -> RunStorage:
        """The storage of the run folder OUT/<code_sha>/<name>/<fold> (its last three parts) under root."""
        parts = Path(run_dir).absolute().parts[-RUN_DEPTH:]
        return cls(root, "/".join(parts))

    def _remote_sizes(self) -> dict[str, int]:
        self.fs.invalidate_cache()  # s3fs keeps listings: another process (the monitor actor) copied meanwhile
        if not self.fs.exists(self.path):
            return {}
        found = self.fs.find(self.path, detail=True)
        prefix = self.path.rstrip("/") + "/"
        return {
            name[len(prefix) :]: int(info.get("size") or 0) for name, info in found.items() if name.startswith(prefix)
        }

    def sync(self, local: str | Path) -> int:
        """Copies every file of the local run folder that changed since this object's last copy (all of them the
        first time, but for the checkpoints and evaluation records already there: they never change once written;
        diag.jsonl gets its new whole lines appended: `_put_lines`), and removes the checkpoints the local folder no
        longer keeps. Returns the bytes copied. A run folder with a lock (a driver's) first checks, or takes, the
        claim on the storage folder (`_claim`): StorageClaimError when another driver holds it; a folder without
        one (evaluate's copy, putting its record back) copies without a claim."""
        t0 = time.perf_counter()
        local = Path(local)
        if self._renames and Path(self.path).resolve() == local.resolve():
            return 0  # the run folder is its storage (a resume of the storage path itself): nothing to copy
        if self.lost is not None:
            raise StorageClaimError(self.lost)
        self._claim(local)
        remote = self._remote_sizes()
        here: dict[str, Path] = {}
        for p in sorted(local.rglob("*")):
            rel = p.relative_to(local).as_posix()
            if p.is_file() and _is_copied(rel):
                here[rel] = p
        copied = 0
        for rel, p in here.items():
            st = p.stat()
            key = (st.st_size, st.st_mtime_ns)
            once = rel.startswith((f"{CHECKPOINT_DIR}/", "evaluations/"))  # written whole, never changed
            if self._sent.get(rel) == key or (once and remote.get(rel) == st.st_size):
                self._sent[rel] = key
                continue
            if rel in APPENDED:
                copied += self._put_lines(rel, p, remote.get(rel))
            else:
                self._put(p, f"{self.path}/{rel}")
                copied += st.st_size
            self._sent[rel] = key
        for rel in remote:
            if rel.startswith(f"{CHECKPOINT_DIR}/") and rel not in here and _is_copied(rel):
                self.fs.rm_file(f"{self.path}/{rel}")  # pruned here: storage keeps what the run folder keeps
                self._sent.pop(rel, None)
        self.seconds["sync_s"] += time.perf_counter() - t0
        self.seconds["synced_bytes"] += copied
        self.seconds["syncs"] += 1
        return copied

    def _put(self, src: Path, dst: str) -> None:
        self.fs.makedirs(dst.rsplit("/", 1)[0], exist_ok=True)
        if self._renames:  # a filesystem: a temporary name, then the rename
            tmp = self._no_link(dst + TMP_SUFFIX)
            self.fs.put_file(str(src), tmp)
            self.fs.mv(tmp, dst)
        else:  # an object store: a put is whole or nothing
            self.fs.put_file(str(src), dst)

    def _no_link(self, path: str) -> str:
        """path, with a symbolic link there removed first on a local filesystem: a temporary name is written to,
        and a link planted there would have the copy written where it points."""
        if self._renames and os.path.islink(path):
            os.unlink(path)
        return path

    def _put_lines(self, rel: str, src: Path, remote_size: int | None) -> int:
        """Copies the whole lines of src (a torn last line, a crash's or one being written, stays out): appended
        to the copy when the copy is a prefix of them that ends on a line (checked against what this object
        copied last, else by comparing the copy's last 4 KiB with the same bytes here) and the filesystem appends;
        rewritten whole otherwise (the first copy, a file cut back by a resume, a copy someone else changed, a
        filesystem without append). Returns the bytes sent."""
        dst = f"{self.path}/{rel}"
        with open(src, "rb") as f:
            end = _whole_end(f, os.fstat(f.fileno()).st_size)
            start = None
            linked = self._renames and os.path.islink(dst)  # rewritten instead: the rename replaces the link
            if self._append_from is not None and remote_size and self._append_from <= remote_size <= end and not linked:
                here = _tail(f, remote_size)
                if here.endswith(b"\n") and (
                    self._lines.get(rel) == (remote_size, hashlib.sha256(here).digest())
                    or self.fs.cat_file(dst, start=remote_size - len(here), end=remote_size) == here
                ):
                    start = remote_size
            if start is None:
                sent = self._rewrite(f, dst, end)
            else:
                f.seek(start)
                sent = self._append(dst, f.read(end - start))
            self._lines[rel] = (end, hashlib.sha256(_tail(f, end)).digest())
        return sent

    def _rewrite(self, f, dst: str, end: int) -> int:
        """dst becomes the first `end` bytes of f, whole: a temporary file renamed over it, or one put."""
        self.fs.makedirs(dst.rsplit("/", 1)[0], exist_ok=True)
        f.seek(0)
        if not self._renames:
            self.fs.pipe_file(dst, f.read(end))
            return end
        tmp = self._no_link(dst + TMP_SUFFIX)
        try:
            with self.fs.open(tmp, "wb") as out:
                left = end
                while left > 0:
                    chunk = f.read(min(_CHUNK, left))
                    if not chunk:
                        raise OSError(f"{f.name} shrank while it was copied")
                    out.write(chunk)
                    left -= len(chunk)
            self.fs.mv(tmp, dst)
        except BaseException:
            if self.fs.exists(tmp):
                self.fs.rm_file(tmp)
            raise
        return end

    def _append(self, dst: str, data: bytes) -> int:
        if not data:
            return 0
        out = self.fs.open(dst, "ab")
        try:
            out.write(data)
        except BaseException:
            discard = getattr(out, "discard", None)
            if callable(discard) and not self._renames:  # an object store's upload dropped, not committed
                discard()
                try:
                    out.closed = True  # fsspec's buffered file would commit at close (or at its __del__)
                except AttributeError:
                    pass
            else:
                out.close()
            raise
        out.close()  # s3fs commits the object here, whole
        return len(data)

    def _owner(self) -> dict | None:
        return json_doc(self._small(OWNER_FILE))

    def _small(self, rel: str) -> bytes | None:
        """A small file of the storage folder (the claim, summary.json): None when it is missing; b"" (read as
        unreadable) when it is over MAX_TEXT_BYTES or not a file, so an endless or huge one is never read."""
        path = f"{self.path}/{rel}"
        try:
            info = self.fs.info(path)
            if info.get("type", "file") != "file" or int(info.get("size") or 0) > MAX_TEXT_BYTES:
                return b""
            if self._renames and not os.path.isfile(path):  # a FIFO, a device: its size says nothing
                return b""
            return self.fs.cat_file(path)
        except FileNotFoundError:
            return None

    def _ended_since_claimed(self, there: dict) -> bool:
        """Whether the run that claimed the storage folder has ended: its summary.json there (copied at a run's
        end) was written at least a second after the claim's `since` (its driver's start, to the second)."""
        try:
            since = datetime.datetime.strptime(str(there.get("since")), "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except ValueError:
            return False
        summary = json_doc(self._small(SUMMARY_FILE)) or {}
        ended = summary.get("status") in ("done", "killed", "stopped", "error")
        when = summary.get("time")
        return ended and isinstance(when, int | float) and when >= since + 1

    def check_resumable(self) -> None:
        """Before a resume of this stored run (`--resume URI`, or the storage folder's path): returns when no
        driver holds its claim, when the claimant's run has ended (_ended_since_claimed), or when the claimant ran
        on this host and its run folder's lock is free (it crashed or was killed: the OS released the lock).
        Otherwise raises StorageClaimError naming the claimant: a resume now would be a second writer of a run
        that is still going on (its driver prunes the checkpoints the copy names, and copies over what the
        resume writes). Changes nothing."""
        there = self._owner()
        if there is None or self._ended_since_claimed(there):
            return
        folder = there.get("run_folder")
        here = there.get("token") and there.get("host") == socket.gethostname() and isinstance(folder, str)
        if here and not lock_held(Path(folder)):
            return
        who = claimant(there)
        if here:
            why = (
                f"cannot resume {self.url}: it is the --storage copy of a run that is running now ({who}), whose "
                f"driver copies it here ({OWNER_FILE} there): a resume of the copy would be a second writer of that "
                "run; wait for that run to end (or stop it), then continue it from its own folder, which is newer "
                f"than this copy: python -m foxhunt_ray.local --resume {folder}; nothing was changed"
            )
        else:
            claim = f"{self.path}/{OWNER_FILE}" if self._renames else f"{self.url}/{OWNER_FILE}"
            rm = f"rm {claim}" if self._renames else f"remove {claim}"
            why = (
                f"cannot resume {self.url}: its storage is claimed by {who} ({OWNER_FILE} there), and that run has "
                "not ended (no summary.json written there since it claimed the copy; it runs on another host, "
                "so its lock cannot be checked from here): a resume while it runs would be a second writer of the "
                "run. If it runs, wait for it to end, then run this again; if it is gone (killed, or its machine "
                f"lost), remove its claim ({rm}), then run this again; nothing was changed"
            )
        raise StorageClaimError(why)

    def _claim(self, local: Path) -> None:
        """Before a copy from a driver's run folder: returns when the storage folder's claim is this driver's, or
        when it takes the claim: where there is none (a new run; a folder copied before claims existed, or whose
        claim was removed by hand), or where the claim is the one this run folder last saw there (a resume of
        this run, of its folder or from the URI; a driver still copying there finds the claim gone at its next
        copy). Else raises StorageClaimError (and keeps its message in `lost`: this object copies no more)."""
        mine = run_token(local)
        if mine is None:
            return
        there = self._owner()
        if there is not None and there.get("token") == mine:
            return
        seen = json_doc(local_doc(local / OWNER_FILE))
        if there is not None and not (seen and there.get("token") and seen.get("token") == there.get("token")):
            raise self._claimed(there, local, held=bool(seen) and seen.get("token") == mine)
        holder = json_doc(local_doc(local / LOCK_FILE)) or {}
        doc = {
            "token": mine,
            "host": holder.get("host", socket.gethostname()),
            "pid": holder.get("pid", os.getpid()),
            "since": holder.get("since", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
            "run_folder": str(local.resolve()),
        }
        text = (json.dumps(doc, sort_keys=True) + "\n").encode()
        dst = f"{self.path}/{OWNER_FILE}"
        self.fs.makedirs(self.path, exist_ok=True)
        if self._renames:
            self.fs.pipe_file(self._no_link(dst + TMP_SUFFIX), text)
            self.fs.mv(dst + TMP_SUFFIX, dst)
        else:
            self.fs.pipe_file(dst, text)
        back = self._owner()  # another driver that claimed at the same moment may have written after us
        if back is None or back.get("token") != mine:
            raise self._claimed(back or {}, local, held=False)
        write_atomic(local / OWNER_FILE, text)

    def _claimed(self, there: dict, local: Path, *, held: bool) -> StorageClaimError:
        who = claimant(there)
        if held:
            why = (
                f"{self.url} was taken over by another driver, {who}, after this one started (a resume of this run "
                f"from there takes the claim over): the stored run is that driver's now. This run's folder {local} "
                "stays whole here; it is no longer copied there"
            )
        else:
            why = (
                f"{self.url} is claimed by another driver, {who} ({OWNER_FILE} there): two drivers copying one "
                "storage folder would mix their files, so this run does not copy there. If that run goes on, give "
                "this one another --name; if it has ended, continue the stored run with "
                f"`--resume {self.url}` (which takes the claim over, and is refused while that run goes on), or "
                f"remove {self.url}/{OWNER_FILE} to let this run folder's copy replace what is there (also the way "
                "out when that run's machine is gone)"
            )
        self.lost = why
        return StorageClaimError(why)

    def fetch(self, local: str | Path, *, checkpoints: bool = True) -> list[Path]:
        """Copies the run's files from storage into the local folder (replacing what is there; each file to a
        temporary name, then renamed); checkpoints=False leaves checkpoints/ out (a report reads none). The copied
        files count as synced. Raises StorageError when storage holds no run there."""
        local = Path(local)
        remote = self._remote_sizes()
        if CONFIG_FILE not in remote:
            raise StorageError(
                f"{self.url} holds no run (no config.json there): pass ROOT/<code_sha>/<name>/<fold> of a run started "
                "with --storage ROOT"
            )
        got = []
        for rel in sorted(remote):
            if not (_is_copied(rel) or rel == OWNER_FILE) or (not checkpoints and rel.startswith(f"{CHECKPOINT_DIR}/")):
                continue  # the claim comes along: a resume from here takes it over (`_claim`)
            dst = local / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(dst.name + TMP_SUFFIX)
            tmp.unlink(missing_ok=True)  # a link there would have the copy written where it points
            self.fs.get_file(f"{self.path}/{rel}", str(tmp))
            os.replace(tmp, dst)
            st = dst.stat()
            self._sent[rel] = (st.st_size, st.st_mtime_ns)
            if rel in APPENDED:
                with open(dst, "rb") as f:
                    end = _whole_end(f, st.st_size)
                    self._lines[rel] = (end, hashlib.sha256(_tail(f, end)).digest())
            got.append(dst)
        return got


def keep_checkpoints(
    run_dir: str | Path, checkpoints: list[Checkpoint], storage: RunStorage | None, *, keep: int = KEEP_CHECKPOINTS
) -> list[Path]:
    """Writes the learner's checkpoints into the run folder (write_checkpoint: whole, the newest `keep` kept, 0: all;
    DriverConfig.keep_checkpoints) and, with
    storage, copies the folder there. A failed copy is told on stderr and the run goes on (the next checkpoint
    copies again, the run's end too); a claim on the storage folder that another driver holds is an error told
    once, and this run copies there no more (its end's copy is refused the same way: exit 1); a failed write
    raises (a full disk ends the run: docs/faults.md)."""
    written = [write_checkpoint(run_dir, c, keep=keep) for c in checkpoints]
    if written and storage is not None and storage.lost is None:
        try:
            storage.sync(run_dir)
        except StorageClaimError as err:
            print(
                f"error: stopped copying {run_dir} to its storage: {err}. The run goes on here",
                file=sys.stderr,
                flush=True,
            )
        except (OSError, ValueError) as err:  # storage out of reach or full: the run folder here is whole
            print(
                f"warning: copying {run_dir} to {storage.url} failed ({type(err).__name__}: {err}); the run goes "
                "on, the next checkpoint copies it again",
                file=sys.stderr,
                flush=True,
            )
    return written


def fetch_to_temp(uri: str, *, checkpoints: bool = True) -> tuple[Path, RunStorage]:
    """A run's URI copied into a temporary folder (removed when this process exits) for a reader that wants files:
    (the local copy, laid out <tmp>/<code_sha>/<name>/<fold>, and its RunStorage: `sync` copies back what the
    reader added, e.g. an evaluation's record). Raises StorageError naming a URI that holds no run."""
    root, rel = split_run_uri(uri)
    store = RunStorage(root, rel)
    tmp = tempfile.mkdtemp(prefix="foxhunt-run-")
    atexit.register(shutil.rmtree, tmp, True)
    local = Path(tmp) / rel
    store.fetch(local, checkpoints=checkpoints)
    return local, store
