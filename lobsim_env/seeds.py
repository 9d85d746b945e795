"""Where every book's seed comes from: training books, a resumed run's books, and the held-out evaluation days.

- **Training books** (`book_seed`): rollout worker w of B books seeds its book i with `seed + w * B + i`, so no
  two workers' books overlap.
- **A resumed run** (`resumed_seed`): its workers start from `seed + step * RESUME_SEED_STRIDE` (step: the learner
  step it resumes from), so they play fresh books, not the run's first episodes again.
- **Held-out days** (`heldout_seed`): fold k's synthetic evaluation day is the seed range `heldout_seed(k) + i`,
  i < HELDOUT_FOLD_STRIDE, far above any training seed; `training_overlap` checks an evaluation's seeds against
  every seed a run's training books may have had (docs/evaluation.md).

A book seeded s replays exactly what `reset(seed=s)` of a single env builds (lobsim_env.env).
"""

from __future__ import annotations

import numpy as np

RESUME_SEED_STRIDE = 1_000_003
"""Seeds between the base seeds of a run resumed at step k and at k + 1: a resumed run gets fresh books."""
HELDOUT_SEED_BASE = 2**40
"""Book 0 of fold 0's held-out synthetic day. Training seeds reach it only after about 1.1 million updates of
resumed runs (seed + step * RESUME_SEED_STRIDE); 10**9 would be reached by a run resumed at update 1,000."""
HELDOUT_FOLD_STRIDE = 2**20
"""Seeds per fold's held-out day: an evaluation of at most this many episodes never touches the next fold's."""
VALIDATION_SEED_OFFSET = 1_000_003
"""A real-day fold's validation windows are seeded heldout_seed(fold) + this (`validation_seed`): another period,
other windows, still below the next fold's range for up to 48,000 windows."""


def validation_seed(fold: int) -> int:
    """Seed of window 0 of fold `fold`'s validation period (the walk-forward protocol on real days)."""
    return heldout_seed(fold) + VALIDATION_SEED_OFFSET


def book_seed(seed: int, worker_index: int, num_envs: int) -> int:
    """Seed of book 0 of a rollout worker; book i gets this + i. Workers' books never overlap (docs/market.md)."""
    return seed + worker_index * num_envs


def resumed_seed(seed: int, resume_step: int) -> int:
    """The base seed of a run's rollout workers when it (re)starts at learner step resume_step (0: a new run)."""
    return seed + resume_step * RESUME_SEED_STRIDE


def heldout_seed(fold: int) -> int:
    """Seed of book 0 of fold `fold`'s held-out synthetic evaluation day; book i is seeded this + i."""
    if isinstance(fold, bool) or not isinstance(fold, int) or fold < 0:
        raise ValueError(f"fold={fold!r} must be an int >= 0")
    return HELDOUT_SEED_BASE + fold * HELDOUT_FOLD_STRIDE


def training_overlap(first: int, count: int, *, seed: int, books: int, last_step: int) -> int | None:
    """The first seed of first .. first+count-1 that a training book of a run may have had; None if none.

    A run of base seed `seed` and `books` books in all (rollout workers x books each) seeds them
    resumed_seed(seed, k) + j, j < books, with k = 0 for a fresh run and k = the resume step for a resumed one;
    every k <= last_step is counted.
    """
    d = np.arange(first, first + count, dtype=np.int64) - seed
    k_hi = np.minimum(last_step, np.floor_divide(d, RESUME_SEED_STRIDE))
    k_lo = np.maximum(0, -np.floor_divide(books - 1 - d, RESUME_SEED_STRIDE))
    hit = np.flatnonzero((d >= 0) & (k_lo <= k_hi))
    return int(first + hit[0]) if hit.size else None
