"""Where LOBSTER's sample days are: the one home of that path for the tests, the benchmarks and any user.

`FOXHUNT_LOBSTER_DATA=<folder>` when set; else `../shared/data/lobster` beside the checkout (the team's layout).
The folder holds LOBSTER's own sample zips (`LOBSTER_SampleFile_<SYMBOL>_2012-06-21_<LEVELS>.zip`) and their ReadMe.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "FOXHUNT_LOBSTER_DATA"
"""Environment variable naming the folder of LOBSTER sample zips."""
DATE = "2012-06-21"
"""The day of LOBSTER's free sample files."""


def data_dir() -> Path:
    """The folder of the sample zips (it may not exist: callers skip or say so)."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    return Path(__file__).resolve().parents[2] / "shared" / "data" / "lobster"


def sample_zip(symbol: str, levels: int) -> Path:
    """The sample day of `symbol` at `levels` levels, e.g. sample_zip("AMZN", 5)."""
    return data_dir() / f"LOBSTER_SampleFile_{symbol}_{DATE}_{levels}.zip"
