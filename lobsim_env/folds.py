"""Walk-forward folds over days: fold k trains on the days before day k and evaluates on day k.

A day is a synthetic day (a seed) or a LOBSTER file; days are given in date order and the folds never let
a training day come after its evaluation day.

Which seeds a synthetic day's books get (training books, a resumed run's, fold k's held-out evaluation day):
lobsim_env.seeds.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from lobsim_env.config import MarketConfig

_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")


@dataclass(kw_only=True, frozen=True)
class DaySpec:
    """One trading day: synthetic (seed) or LOBSTER (lobster_path); `date` orders the days."""

    name: str
    date: str
    """YYYY-MM-DD for LOBSTER days; for synthetic days a sortable label (e.g. 'synthetic-0003')."""
    seed: int | None = None
    lobster_path: str | None = None

    def config(self, base: MarketConfig) -> MarketConfig:
        """`base` pointed at this day (the seed itself is passed to reset by the caller)."""
        if self.lobster_path is not None:
            return dataclasses.replace(base, source="lobster", lobster_path=self.lobster_path)
        return dataclasses.replace(base, source="synthetic", lobster_path=None)


@dataclass(kw_only=True, frozen=True)
class Fold:
    index: int
    """k: evaluates on day k (0-based in the day list)."""
    train: tuple[DaySpec, ...]
    evaluate: DaySpec


def synthetic_days(n: int, *, first_seed: int = 0) -> list[DaySpec]:
    """n synthetic days with seeds first_seed, first_seed + 1, ... in that order."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be an int >= 1")
    return [
        DaySpec(name=f"synthetic-{first_seed + i}", date=f"synthetic-{first_seed + i:06d}", seed=first_seed + i)
        for i in range(n)
    ]


def lobster_days(paths: list[str | Path]) -> list[DaySpec]:
    """LOBSTER files as days, sorted by the date in their names (LOBSTER names them TICKER_YYYY-MM-DD_...)."""
    days = []
    for p in paths:
        m = _DATE.search(Path(p).name)
        if m is None:
            raise ValueError(f"{p}: no YYYY-MM-DD date in the file name; LOBSTER files are named TICKER_DATE_...")
        days.append(DaySpec(name=Path(p).name, date=m.group(1), lobster_path=str(p)))
    return sorted(days, key=lambda d: d.date)


def walk_forward(days: list[DaySpec], *, min_train: int = 1) -> list[Fold]:
    """Folds k = min_train .. len(days) - 1: train on days[:k], evaluate on days[k].

    Raises ValueError if the days are not in strictly increasing date order (a training day would come at or
    after its evaluation day) or if there are not enough days for one fold.
    """
    if not isinstance(min_train, int) or min_train < 1:
        raise ValueError(f"min_train={min_train!r} must be an int >= 1")
    if len(days) <= min_train:
        raise ValueError(f"{len(days)} days give no fold with min_train={min_train}: need at least {min_train + 1}")
    for a, b in itertools.pairwise(days):
        if not a.date < b.date:
            raise ValueError(
                f"days must be in strictly increasing date order: {a.name} ({a.date}), then {b.name} ({b.date})"
            )
    return [Fold(index=k, train=tuple(days[:k]), evaluate=days[k]) for k in range(min_train, len(days))]
