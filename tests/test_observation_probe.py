"""benchmarks/observation_probe.py: what a classifier of the regime is given from one observation."""

import dataclasses

import numpy as np

from benchmarks import observation_probe as op
from foxhunt_ray.presets import run_preset
from lobsim_env.market import obs_index, obs_size

PLAIN = dataclasses.replace(run_preset("phase4_3").market, horizon=120, depth_flow_ticks=0)
CFG = dataclasses.replace(PLAIN, depth_flow_ticks=op.DEPTH_FLOW_TICKS)


def test_each_input_is_what_its_name_says():
    data = op.collect(CFG, 4, op.FIT_SEED)
    observations, flow, z = data
    plain, ix = obs_size(PLAIN), obs_index(CFG)
    x, y = op.features(data, "observation", plain)
    assert x.shape == (120 * 4, plain) and np.array_equal(y, z.reshape(-1) + 1)
    assert "depth_flow" not in obs_index(PLAIN) and x.shape[1] == ix["depth_flow"]  # the columns before it
    x, _ = op.features(data, "+ depth flow", plain)
    assert x.shape[1] == obs_size(CFG) and np.abs(x[:, ix["depth_flow"]]).max() > 0
    x, _ = op.features(data, "+ trade flow, 100 steps", plain)
    window = x.reshape(120, 4, -1)[:, :, plain:]
    assert window.shape[-1] == op.FLOW_WINDOW
    # the newest entry is the step's own flow, the oldest the flow 99 steps back (zeros before the episode)
    assert np.array_equal(window[:, :, -1], flow) and np.array_equal(window[99:, :, 0], flow[:21])
    assert not window[:99, :, 0].any()
    # the flow is the trade flow the observation's fast EMA integrates
    d, ema = CFG.synthetic.flow_decay, np.zeros(4)
    for t in range(120):
        ema = d * ema + (1 - d) * flow[t]
        np.testing.assert_allclose(observations[t, :, ix["flow"]], ema / CFG.size_scale, rtol=1e-4, atol=1e-6)


def test_a_classifier_fitted_on_labelled_books_tells_the_regime_better_than_its_base_rate(tmp_path):
    train, test = op.collect(CFG, 48, op.FIT_SEED), op.collect(CFG, 16, op.SCORE_SEED)
    plain = obs_size(PLAIN)
    r = op.fit_and_score(op.features(train, "observation", plain), op.features(test, "observation", plain), 2, 0)
    base = np.bincount(test[2].ravel() + 1, minlength=3).max() / test[2].size
    assert r["right_share"] > base + 0.05 and r["inputs"] == plain
