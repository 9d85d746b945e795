"""code_sha: which code a run ran, stamped into every diag line (DESIGN.md; the seed lost two cluster runs to
running the wrong commit).

With git there: `git rev-parse HEAD`, plus "-dirty" when tracked files differ from it. Without git (a
`ray job submit --working-dir` upload carries no .git): "content-" + a hash of the code files, so such a run is
stamped too. The content hash covers every source that changes what a run does: the packages' Python, their C,
C++ and CUDA sources and headers (lobsim_env/lobster/_lobster_fast.c, cuda/kernels/*.cu, *.cuh, *.h, cuda/binding/*.cpp)
and the build files (pyproject.toml, setup.py, setup.cfg); never tests, runs, the virtualenv or build outputs
(*.so: a build of the sources that are hashed), so the hash of a checkout and of its upload agree: `python -m
foxhunt_ray.provenance` prints both, and `--expect-code-sha` accepts either.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS: tuple[str, ...] = ("foxhunt_ray", "actors", "learner", "lobsim_env", "cuda")
CODE_SUFFIXES: frozenset[str] = frozenset(
    {".py", ".pyx", ".pxd", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh", ".inc"}
)
"""Sources that change behaviour: every C, C++ and CUDA source and header too, so a changed kernel changes the stamp."""
BUILD_FILES: tuple[str, ...] = ("pyproject.toml", "setup.py", "setup.cfg")
"""Files at the root that decide how the sources are built."""
CONTENT_PREFIX = "content-"


def code_files(root: Path = REPO_ROOT) -> list[Path]:
    """The files the content hash covers, sorted by their path relative to root."""
    files = [root / name for name in BUILD_FILES if (root / name).is_file()]
    for name in CODE_DIRS:
        top = root / name
        if top.is_dir():
            files += [
                p for p in top.rglob("*") if p.suffix in CODE_SUFFIXES and p.is_file() and "__pycache__" not in p.parts
            ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def content_sha(root: Path = REPO_ROOT) -> str:
    """'content-' + 16 hex digits of sha256 over (relative path, bytes) of every code file."""
    h = hashlib.sha256()
    for path in code_files(root):
        rel = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little") + data)
    return CONTENT_PREFIX + h.hexdigest()[:16]


def git_sha(root: Path = REPO_ROOT) -> str | None:
    """HEAD (+ '-dirty' when tracked files changed) when root is the top of a git work tree, else None."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    # A tree without its own .git inside some other repository (an upload unpacked under a checkout) must
    # not borrow that repository's commit.
    if top is None or Path(top).resolve() != root.resolve():
        return None
    head = git("rev-parse", "HEAD")
    if not head:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return head + ("-dirty" if status else "")


def code_sha(root: Path = REPO_ROOT) -> str:
    """The run's code stamp: the git commit (+ '-dirty') where git is there, else the content hash."""
    return git_sha(root) or content_sha(root)


def matches(expected: str, root: Path = REPO_ROOT) -> tuple[bool, str]:
    """(whether `expected` names this code, the code_sha): it must equal the code_sha or the content hash (what
    a git-less upload of the same files computes)."""
    sha = code_sha(root)
    return expected in (sha, content_sha(root)), sha


def main() -> int:
    print(f"code_sha    {code_sha()}")
    print(f"content_sha {content_sha()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
