"""A storage folder's claim (`OWNER_FILE`): which driver copies a run there, read and told apart from the run folder's
own lock. foxhunt_ray.storage writes and checks the claim (RunStorage.claim, check_resumable); this module is what
both sides of it read: the run token of the driver holding a run folder, a claim's JSON, whether a lock is held now,
and the claimant in words. The module docstring of foxhunt_ray.storage says what the claim guards and what not.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
from pathlib import Path

from actors.files import read_bounded
from foxhunt_ray.run_folder import LOCK_FILE

OWNER_FILE = "storage-owner.json"
"""The storage folder's claim: {"token", "host", "pid", "since", "run_folder"} of the driver that copies there (and,
in the run folder, the claim as this folder last saw it there). Not copied by `sync`: written by the claim."""


def run_token(local: str | Path) -> str | None:
    """The token of the driver that holds the run folder's lock now: its host, the folder, and run.lock as that
    driver wrote it (pid, host, time; the file's inode and mtime), the same for every process of the run on the
    driver's node and new at each driver's start. None when the folder has no lock (a reader's copy: evaluate's)."""
    lock = Path(local) / LOCK_FILE
    try:
        st = lock.lstat()
        text = read_bounded(lock, follow=False)
    except FileNotFoundError:
        return None
    seed = f"{socket.gethostname()}\0{Path(local).resolve()}\0{st.st_ino}\0{st.st_mtime_ns}\0".encode() + text
    return hashlib.sha256(seed).hexdigest()[:24]


def json_doc(raw: bytes | None) -> dict | None:
    """A small JSON file of a run (a claim, the lock's holder note, summary.json) as a dict: None for no file, {} for
    one that cannot be read (a claim that cannot be read still claims the folder)."""
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def local_doc(path: Path) -> bytes | None:
    """A local JSON file of the run folder (the lock's holder note, the claim as last seen), bounded and never
    through a link: None when missing, b"" when it cannot be read (read as unreadable)."""
    try:
        return read_bounded(path, follow=False)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return b""


def claimant(there: dict) -> str:
    """The claimant of a storage folder, in words."""
    if not there.get("token"):
        return "a driver whose claim cannot be read"
    return (
        f"pid {there.get('pid', '?')} on host {there.get('host', '?')} (since {there.get('since', '?')}), run "
        f"folder {there.get('run_folder', '?')}"
    )


def lock_held(folder: Path) -> bool:
    """Whether a process holds folder/run.lock now (a shared flock is tried and dropped at once)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # drops the shared lock, if taken
    return False
