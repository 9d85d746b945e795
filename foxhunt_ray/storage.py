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
a put is whole or nothing. Only the driver's node touches ROOT; the run folder's lock (foxhunt_ray.run_folder)
guards the local copy only: two drivers resuming one URI on two machines would both write it.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath

from actors.checkpoints import CHECKPOINT_DIR, Checkpoint, write_checkpoint
from actors.files import TMP_SUFFIX
from foxhunt_ray.run_folder import CONFIG_FILE, LOCK_FILE
from lobsim_env.validation import InputError

RUN_DEPTH = 3
"""A run's folder below a runs root or a storage root: <code_sha>/<name>/<fold>."""
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
PLUGINS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "abfs": "adlfs", "az": "adlfs"}
"""fsspec's plugin package per protocol, named in the error when it is missing."""


class StorageError(InputError):
    """A storage root or run URI that cannot be used; the message names it and the fix."""


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
    """Whether a run folder's file goes to storage: all but the lock and temporary files."""
    name = rel.rsplit("/", 1)[-1]
    return name != LOCK_FILE and not name.endswith(TMP_SUFFIX)


class RunStorage:
    """One run's folder in a storage root: ROOT/<code_sha>/<name>/<fold>. `sync(local)` copies what changed,
    `fetch(local)` copies it back."""

    def __init__(self, root: str, rel: str | PurePosixPath):
        self.root = root_of(root)
        self.rel = PurePosixPath(rel).as_posix()
        self.fs, base = _open(self.root)
        self.path = f"{base.rstrip('/')}/{self.rel}"
        self.url = f"{self.root}/{self.rel}"
        self._renames = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))
        self._sent: dict[str, tuple[int, int]] = {}  # rel path -> (size, mtime_ns) as copied by this object
        self.seconds = {"sync_s": 0.0, "synced_bytes": 0.0, "syncs": 0.0}

    @classmethod
    def of_run(cls, root: str, run_dir: str | Path) -> RunStorage:
        """The storage of the run folder OUT/<code_sha>/<name>/<fold> (its last three parts) under root."""
        parts = Path(run_dir).absolute().parts[-RUN_DEPTH:]
        return cls(root, "/".join(parts))

    def _remote_sizes(self) -> dict[str, int]:
        if not self.fs.exists(self.path):
            return {}
        found = self.fs.find(self.path, detail=True)
        prefix = self.path.rstrip("/") + "/"
        return {
            name[len(prefix) :]: int(info.get("size") or 0) for name, info in found.items() if name.startswith(prefix)
        }

    def sync(self, local: str | Path) -> int:
        """Copies every file of the local run folder that changed since this object's last copy (all of them the
        first time, but for the checkpoints and evaluation records already there: they never change once written),
        and removes the checkpoints the local folder no longer keeps. Returns the bytes copied."""
        t0 = time.perf_counter()
        local = Path(local)
        if self._renames and Path(self.path).resolve() == local.resolve():
            return 0  # the run folder is its storage (a resume of the storage path itself): nothing to copy
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
            self._put(p, f"{self.path}/{rel}")
            self._sent[rel] = key
            copied += st.st_size
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
            tmp = dst + TMP_SUFFIX
            self.fs.put_file(str(src), tmp)
            self.fs.mv(tmp, dst)
        else:  # an object store: a put is whole or nothing
            self.fs.put_file(str(src), dst)

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
            if not _is_copied(rel) or (not checkpoints and rel.startswith(f"{CHECKPOINT_DIR}/")):
                continue
            dst = local / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(dst.name + TMP_SUFFIX)
            self.fs.get_file(f"{self.path}/{rel}", str(tmp))
            os.replace(tmp, dst)
            st = dst.stat()
            self._sent[rel] = (st.st_size, st.st_mtime_ns)
            got.append(dst)
        return got


def keep_checkpoints(run_dir: str | Path, checkpoints: list[Checkpoint], storage: RunStorage | None) -> list[Path]:
    """Writes the learner's checkpoints into the run folder (write_checkpoint: whole, the newest two kept) and, with
    storage, copies the folder there. A failed copy is told on stderr and the run goes on (the next checkpoint
    copies again, the run's end too); a failed write raises (a full disk ends the run: docs/faults.md)."""
    written = [write_checkpoint(run_dir, c) for c in checkpoints]
    if written and storage is not None:
        try:
            storage.sync(run_dir)
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
