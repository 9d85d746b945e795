"""lobsim_env.stats: the paired interval and test of the agent against a baseline on the same windows, and Holm's
adjustment over folds."""

from __future__ import annotations

import numpy as np
import pytest

from lobsim_env.stats import holm, paired


def test_a_constant_gap_has_a_point_interval_and_a_small_p():
    rng = np.random.default_rng(0)
    base = rng.normal(0, 100, 64)  # the windows' common luck cancels in the pairs
    r = paired(base + 5.0, base)
    assert r.mean == pytest.approx(5.0) and r.ci95 == pytest.approx((5.0, 5.0)) and r.windows == 64
    assert r.p_value < 0.001


def test_a_zero_mean_gap_has_an_interval_around_zero_and_no_significance():
    rng = np.random.default_rng(1)
    gap = rng.normal(0, 10, 200)
    gap -= gap.mean()
    r = paired(gap, np.zeros(200))
    assert r.ci95[0] < 0 < r.ci95[1] and r.p_value > 0.9
    assert paired(gap, np.zeros(200)) == r  # seeded: the same figures again
    shifted = paired(gap + 3.0, np.zeros(200))  # 3 against a standard error of about 0.7
    assert shifted.ci95[0] > 0 and shifted.p_value < 0.001


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="one length >= 2"):
        paired(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="one length >= 2"):
        paired(np.zeros(1), np.zeros(1))


def test_holm_adjusts_in_rank_order_and_keeps_the_order_given():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
