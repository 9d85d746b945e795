"""Writing a run folder's files so that a failed write leaves nothing behind: whole files or nothing.

`write_atomic` writes a temporary file beside the target and renames it over; when the write fails (a full
disk, a quota, a file-size limit) the temporary file is removed before the error goes on, so no `.tmp` is ever
left. `disk_full` tells such an error apart from the others: the driver ends the run with one message for it
(docs/faults.md). The monitor's append of diag.jsonl has its own rule (actors.diag_file.DiagWriter.append: whole
lines, cut back to the last one on a failed write).

No write follows a symbolic link: a link planted in a run folder (run.lock, diag.jsonl, a `.tmp` name) would have
the run write into the file it points at. `open_run_file` opens a run folder's file with O_NOFOLLOW and refuses a
link or anything but a regular file (RunFileError, naming the path); `write_atomic` opens its temporary file so.
`read_bounded` is the one reader of a file that a user or a run folder hands over (a --config file, config.json,
summary.json, diag.jsonl, a lock or a claim): it refuses anything but a regular file (a FIFO, /dev/zero, a
folder) and a file over its limit (`MAX_TEXT_BYTES`, `MAX_DIAG_BYTES`) before it reads a byte, and reads no more
than the limit (a file that grows while read): an endless input is named, never read (docs/faults.md).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from lobsim_env.validation import InputError

TMP_SUFFIX = ".tmp"
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""No space left on the device, a disk quota used up, a file larger than the process may write (RLIMIT_FSIZE)."""
MAX_TEXT_BYTES = 16 * 2**20
"""The most bytes read of a config file (--config, config.json, config.written.json, config.sha256) or of a run
folder's other JSON (summary.json, an evaluation record, run.lock, the storage claim): a run writes a few KB."""
MAX_DIAG_BYTES = 2 * 2**30
"""The most bytes read of a diag.jsonl (a resume, a --baseline, the report, evaluate): a run writes about 1.2 KB an
update, so this holds some 1.7 million updates, more than the driver's default budget of 1,000,000."""


def _limit(limit: int) -> str:
    """A read limit in words, with the constant that sets it."""
    names = {MAX_TEXT_BYTES: "actors.files.MAX_TEXT_BYTES", MAX_DIAG_BYTES: "actors.files.MAX_DIAG_BYTES"}
    named = f" ({names[limit]})" if limit in names else ""
    return f"the limit of {limit:,} bytes for such a file{named}"


class RunFileError(InputError):
    """A file that is not what a run folder or a flag must hold: a symbolic link where the run writes, something
    other than a regular file (a FIFO, a device, a folder), or a file over the size limit of its kind. The
    message names the path, what it is, and the fix."""


def kind_of(path: str | Path, *, follow: bool = True) -> str:
    """What path is, in words: 'a regular file', 'a folder', 'a FIFO (named pipe)', 'a character device', ...,
    'a symbolic link to T' (follow=False), or 'missing'."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return "missing"
    except OSError as err:
        return f"unreadable ({err.strerror or err})"
    return _kind(st.st_mode, path)


def _kind(mode: int, path: str | Path | None = None) -> str:
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link to {os.readlink(path)}" if path is not None else "a symbolic link"
        except OSError:
            return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device (such as /dev/zero)"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse_link(path: Path, fix: str) -> RunFileError:
    return RunFileError(
        f"{path} is {kind_of(path, follow=False)}: a run folder's files must be regular files, not links (a link "
        f"there would have this run write into the file it points at); {fix}"
    )


def open_run_file(path: str | Path, flags: int, mode: int = 0o666, *, fix: str | None = None) -> int:
    """os.open(path, flags) without following a symbolic link (O_NOFOLLOW), nor blocking on a FIFO (O_NONBLOCK,
    cleared once open); a link or anything but a regular file is closed and refused (RunFileError naming the
    path and `fix`, by default: remove it). Returns the descriptor."""
    path = Path(path)
    fix = fix or f"remove it (rm {path}) and run this again; nothing was written to it"
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP or (err.errno == errno.ENXIO and os.path.islink(path)):
            raise _refuse_link(path, fix) from None
        if err.errno in (errno.ENXIO, errno.EISDIR, errno.EOPNOTSUPP):  # a FIFO without a reader, a folder, a socket
            raise RunFileError(f"{path} is {kind_of(path, follow=False)}, not a regular file; {fix}") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RunFileError(f"{path} is {_kind(st.st_mode)}, not a regular file; {fix}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(
    path: str | Path,
    limit: int = MAX_TEXT_BYTES,
    *,
    follow: bool = True,
    what: str = "",
    fix: str = "",
    error: type[InputError] = RunFileError,
) -> bytes:
    """The bytes of the regular file path, at most `limit` of them: a FIFO, a device (/dev/zero), a folder or a
    socket is refused before a byte is read, and so is a file of more than `limit` bytes (by its size, and again
    by what is read: a file that grows while it is read); follow=False refuses a symbolic link too. Raises `error`
    (RunFileError by default) naming the path (`what` it is, e.g. '--config'), its kind or size, the limit and
    `fix`; FileNotFoundError and other OSErrors of the open go on as they are."""
    path = Path(path)
    name = f"{what} {path}" if what else str(path)
    tail = f"; {fix}" if fix else ""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP and not follow:
            raise error(f"{name} is {kind_of(path, follow=False)}, not a regular file{tail}") from None
        if err.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket
            raise error(f"{name} is {kind_of(path)}, not a regular file{tail}") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{name} is {_kind(st.st_mode)}, not a regular file: nothing was read from it{tail}")
        if st.st_size > limit:
            raise error(f"{name} is {st.st_size:,} bytes, over {_limit(limit)}: it was not read{tail}")
        os.set_blocking(fd, True)
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise error(
                f"{name} holds more than {_limit(limit)} (it grew as it was read){tail}"
            )
        return data
    finally:
        os.close(fd)


def _causes(err: BaseException | None):
    """err, then its cause or context (a Ray task error's own cause first), each once."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = getattr(err, "cause", None) or err.__cause__ or err.__context__


def disk_full(err: BaseException | None) -> OSError | None:
    """The OSError of a full disk behind err (itself, its cause or context, or a Ray task error's cause), or None."""
    return next((e for e in _causes(err) if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS), None)


def refused_file(err: BaseException | None) -> RunFileError | None:
    """The RunFileError behind err (a link or a FIFO planted in the run folder while the run wrote it, refused by
    open_run_file), as disk_full finds a full disk; None if there is none."""
    return next((e for e in _causes(err) if isinstance(e, RunFileError)), None)


def write_atomic(path: str | Path, data: str | bytes, *, sync: bool = False) -> None:
    """path gets data whole, or keeps what it held: a temporary file beside it, then os.replace; on any failure
    the temporary file is removed and the error raised. sync: fsync before the rename (survives a power cut)."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    raw = data.encode() if isinstance(data, str) else data
    fd = open_run_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # a link planted at the .tmp name: refused
    try:
        with open(fd, "wb") as f:
            f.write(raw)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)  # a link at path itself is replaced, never written through
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
