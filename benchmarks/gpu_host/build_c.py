"""Builds lobsim_env's optional C modules in place, for a host where `pip install -e .` cannot run (the GPU image
has no network and no foxhunt_ray installed): the same sources pyproject.toml's ext-modules name, compiled with
this interpreter's compiler and flags (sysconfig), next to their Python packages.

    python3 -m benchmarks.gpu_host.build_c

Prints one line a module (its path, or why it was not built: the modules are optional, the market then steps in
Python) and exits 0 when every module was built.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = {
    "lobsim_env/lobster/_lobster_fast": "lobsim_env/lobster/_lobster_fast.c",
    "lobsim_env/replay/_replay_fast": "lobsim_env/replay/_replay_fast.c",
}


def build(stem: str, source: str) -> tuple[bool, str]:
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    flags = ["-O3", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}"]
    out = ROOT / f"{stem}{sysconfig.get_config_var('EXT_SUFFIX')}"
    done = subprocess.run([*cc, *flags, "-o", str(out), str(ROOT / source), "-lm"], capture_output=True, text=True)
    if done.returncode != 0:
        return False, done.stderr.strip()[-2000:]
    return True, str(out.relative_to(ROOT))


def main() -> int:
    ok = True
    for stem, source in MODULES.items():
        built, what = build(stem, source)
        ok &= built
        print(f"{'built' if built else 'NOT built'} {what if built else source + ': ' + what}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
