"""Packs what a GPU image without Ray needs for the GPU host's steps, on a machine where pip reaches PyPI:

    python3 -m benchmarks.gpu_host.bundle            # .devbundle/site.tar.xz: Ray, gymnasium, pytest (~20 MB)
    python3 -m benchmarks.gpu_host.bundle --rllib    # and .devbundle/rllib.tar.xz: RLlib and its pins (the rllib step)

The wheels are CPython 3.12 x86_64 manylinux ones at the versions of constraints.txt (the GPU image's Python is 3.12;
it has torch, numpy, msgpack, pandas, pyarrow, scipy, pyyaml, requests). Ray is trimmed to what a trainer on Ray
Core imports (no rllib, tune, data, train, serve, llm, jars, nor the dashboard's web client), its three native
binaries' symbol tables are stripped (the dynamic symbols stay), and the rest is xz-packed: about 20 MB, so that
it travels beside the working tree where a remote call takes 64 MiB in all. `.devbundle/` is git-ignored.

RLlib pins gymnasium 1.2.2 where this project pins 1.4.0: rllib.tar.xz holds `rlray/` (Ray's rllib, tune, data and
train, copied into the bundle's ray/ there) and `rlsite/` (gymnasium 1.2.2 and the wheels RLlib imports that the
image lacks), put ahead of the bundle on PYTHONPATH for that step only (benchmarks.gpu_host.runner.step_env).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".devbundle"
PLATFORM = ("--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux2014_x86_64",
            "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64")
SITE = ("ray", "gymnasium", "farama-notifications", "cloudpickle", "jsonschema", "referencing", "rpds-py",
        "jsonschema-specifications", "pytest", "pluggy", "iniconfig", "packaging", "pygments")
"""Ray and gymnasium with the pure-Python or cp312 packages they import that the image lacks, and pytest for the
checks step."""
RLLIB = ("gymnasium==1.2.2", "farama-notifications", "dm-tree==0.1.10", "lz4==4.4.5", "pydantic", "pydantic_core",
         "annotated-types", "typing-inspection", "smart_open", "ormsgpack==1.13.1", "tensorboardX==2.6.5")
RAY_LEFT_OUT = ("jars", "rllib", "llm", "serve", "data", "tune", "train", "dashboard/client/build")
RAY_BINARIES = ("_raylet.so", "core/src/ray/gcs/gcs_server", "core/src/ray/raylet/raylet")


def pinned(names: tuple[str, ...], constraints: Path = ROOT / "constraints.txt") -> list[str]:
    """Each name at its constraints.txt version where it has one (and no pin of its own)."""
    pins = {}
    for line in constraints.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    out = []
    for name in names:
        key = name.lower().replace("_", "-")
        out.append(name if "==" in name or key not in pins else f"{name}=={pins[key]}")
    return out


def download(specs: list[str], dest: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", *PLATFORM,
           "-d", str(dest), *specs]
    subprocess.run(cmd, check=True)
    return sorted(dest.glob("*.whl"))


def xz(src: Path, members: list[str], dest: Path) -> None:
    """tar | xz -9e (xz's own threads): about a third smaller than Python's lzma at its default preset."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    with partial.open("wb") as f:
        tar = subprocess.Popen(["tar", "-C", str(src), "-cf", "-", *members], stdout=subprocess.PIPE)
        subprocess.run(["xz", "-T2", "-9e"], stdin=tar.stdout, stdout=f, check=True)
        if tar.wait() != 0:
            raise SystemExit(f"tar failed packing {src}")
    partial.replace(dest)
    print(f"{dest.relative_to(ROOT)}: {dest.stat().st_size / 2**20:.1f} MiB")


def unzip(wheel: Path, dest: Path, members: list[str] | None = None) -> None:
    """Extract a wheel keeping each file's mode bits (zipfile drops them: raylet and gcs_server must stay
    executable)."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if members is None or info.filename in members:
                path = Path(z.extract(info, dest))
                mode = (info.external_attr >> 16) & 0o777
                if mode and not info.is_dir():
                    path.chmod(mode)


def site_bundle(work: Path) -> None:
    site = work / "site"
    for wheel in download(pinned(SITE), work / "whl"):
        unzip(wheel, site)
    for part in RAY_LEFT_OUT:
        shutil.rmtree(site / "ray" / part, ignore_errors=True)
    for binary in RAY_BINARIES:
        subprocess.run(["strip", "--strip-unneeded", str(site / "ray" / binary)], check=True)
    xz(site, ["."], OUT / "site.tar.xz")


def rllib_bundle(work: Path) -> None:
    ray_wheel = download(pinned(("ray",)), work / "rayonly")[0]
    out = work / "rl"
    out.mkdir()
    with zipfile.ZipFile(ray_wheel) as z:
        parts = [n for n in z.namelist() if n.split("/")[1:2] and n.split("/")[1] in ("rllib", "tune", "data", "train")]
    unzip(ray_wheel, work / "rayparts", parts)
    shutil.move(work / "rayparts" / "ray", out / "rlray")
    for wheel in download(pinned(RLLIB), work / "rlwhl"):
        unzip(wheel, out / "rlsite")
    xz(out, ["rlray", "rlsite"], OUT / "rllib.tar.xz")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.gpu_host.bundle", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rllib", action="store_true", help="also .devbundle/rllib.tar.xz for the rllib step")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        site_bundle(Path(tmp))
        if args.rllib:
            rllib_bundle(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
