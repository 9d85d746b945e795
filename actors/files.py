"""Writing a run folder's files so that a failed write leaves nothing behind: whole files or nothing.

`write_atomic` writes a temporary file beside the target and renames it over; when the write fails (a full
disk, a quota, a file-size limit) the temporary file is removed before the error goes on, so no `.tmp` is ever
left. `disk_full` tells such an error apart from the others: the driver ends the run with one message for it
(docs/faults.md). The monitor's append of diag.jsonl has its own rule (actors.monitor.Monitor._write: whole
lines, cut back to the last one on a failed write).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

TMP_SUFFIX = ".tmp"
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""No space left on the device, a disk quota used up, a file larger than the process may write (RLIMIT_FSIZE)."""


def disk_full(err: BaseException | None) -> OSError | None:
    """The OSError of a full disk behind err (itself, its cause or context, or a Ray task error's cause), or None."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
            return err
        err = getattr(err, "cause", None) or err.__cause__ or err.__context__
    return None


def write_atomic(path: str | Path, data: str | bytes, *, sync: bool = False) -> None:
    """path gets data whole, or keeps what it held: a temporary file beside it, then os.replace; on any failure
    the temporary file is removed and the error raised. sync: fsync before the rename (survives a power cut)."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    raw = data.encode() if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_tmp_files(folder: str | Path, below: tuple[str, ...] = ("checkpoints",)) -> list[Path]:
    """Removes the temporary files that failed or crashed writes of the run left in the run folder and the folders
    `below` it (not evaluations/: `foxhunt_ray.evaluate` writes there without the run's lock); returns them."""
    folder = Path(folder)
    found = [p for d in (folder, *(folder / b for b in below)) for p in d.glob("*" + TMP_SUFFIX)]
    for p in found:
        p.unlink(missing_ok=True)
    return found
