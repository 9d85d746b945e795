"""Where LOBSTER's sample days are: the one home of that path for the tests, the benchmarks and any user.

`FOXHUNT_LOBSTER_DATA=<folder>` when set; else `shared/data/lobster` in the folder that holds the checkout, else
the team machines' copy, `TEAM_DIR` (for a clean clone elsewhere, as CI's).
The folder holds LOBSTER's own sample zips (`LOBSTER_SampleFile_<SYMBOL>_2012-06-21_<LEVELS>.zip`, the free samples
of lobsterdata.com) and their ReadMe.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "FOXHUNT_LOBSTER_DATA"
"""Environment variable naming the folder of LOBSTER sample zips."""
DATE = "2012-06-21"
"""The day of LOBSTER's free sample files."""


TEAM_DIR = Path("/work/shared/data/lobster")
"""The team machines' copy, for a clone with no sample folder beside it (CI's clean clone)."""


def data_dir() -> Path:
    """The folder of the sample zips: FOXHUNT_LOBSTER_DATA, else shared/data/lobster in the folder that holds the
    checkout when it exists, else the team machines' copy (it may not exist either: callers skip or say so)."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    beside = Path(__file__).resolve().parents[3] / "shared" / "data" / "lobster"
    return beside if beside.is_dir() or not TEAM_DIR.is_dir() else TEAM_DIR


def sample_zip(symbol: str, levels: int) -> Path:
    """The sample day of `symbol` at `levels` levels, e.g. sample_zip("AMZN", 5)."""
    return data_dir() / f"LOBSTER_SampleFile_{symbol}_{DATE}_{levels}.zip"
