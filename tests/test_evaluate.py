"""`python -m foxhunt_ray.evaluate`: a trained run's checkpoint beside the baselines on held-out episodes."""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from foxhunt_ray import driver, report
from foxhunt_ray.evaluate import (
    AGENT,
    METRIC_KEYS,
    EvaluationError,
    describe,
    evaluate_run,
    evaluation_market,
    load_agent,
    load_run,
    main,
    training_overlap,
)
from foxhunt_ray.evaluations import record_name
from learner.learner import Learner
from learner.network import policy_from_weights
from lobsim_env import Action, LobVectorEnv, MarketConfig
from lobsim_env.baselines import POLICIES, evaluate_policy, run_episodes
from lobsim_env.lobster import samples
from lobsim_env.lobster.market import lobster_config
from lobsim_env.seeds import HELDOUT_FOLD_STRIDE, RESUME_SEED_STRIDE, book_seed, heldout_seed
from lobsim_env.validation import InputError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

AMZN_1 = samples.sample_zip("AMZN", 1)
EPISODES = 8
TOP_KEYS = {"run_dir", "checkpoint", "checkpoint_step", "fold", "market", "episodes", "eval_seed", "policies"}
TOP_KEYS |= {"created", "seed_origin", "trained_on", "held_out", "horizon", "policy_head", "caveat"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny trained run: smoke, serial, 8 updates, checkpoints at steps 4 and 8."""
    out = tmp_path_factory.mktemp("runs")
    argv = ["--preset", "smoke", "--steps", "8", "--checkpoint-every", "4", "--checkpoint-interval-s", "0"]
    argv += ["--serial", "--quiet", "--out", str(out)]
    assert driver.main(argv) == 0
    (found,) = out.glob("*/*/0")
    return found


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run_dir, dst)
    (dst / "evaluation.json").unlink(missing_ok=True)
    shutil.rmtree(dst / "evaluations", ignore_errors=True)
    return dst


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- the result -------------------------------------------------------------------------------------------


def test_evaluation_json_has_every_key_and_the_agent_beside_each_baseline(run_dir):
    lines: list[str] = []
    result = evaluate_run(run_dir, episodes=EPISODES, progress=lines.append)
    saved = json.loads((run_dir / "evaluation.json").read_text())
    assert saved == json.loads(json.dumps(result))
    record = run_dir / "evaluations" / f"synthetic-fold0-step00000008-{EPISODES}ep-h{result['horizon']}-pi.json"
    assert json.loads(record.read_text()) == saved  # its own record; evaluation.json is the newest synthetic copy
    assert TOP_KEYS | {"oracle_fraction"} <= set(saved)
    assert (saved["seed_origin"], saved["trained_on"], saved["caveat"]) == ("heldout_seed(fold)", "synthetic", None)
    assert saved["checkpoint_step"] == 8 and saved["checkpoint"].endswith("ckpt_00000008.pt")
    assert (saved["market"], saved["fold"], saved["episodes"]) == ("synthetic", 0, EPISODES)
    assert saved["eval_seed"] == heldout_seed(0)
    assert list(saved["policies"]) == [AGENT, "flat", "random", "imbalance", "oracle"]
    for name, m in saved["policies"].items():
        assert set(METRIC_KEYS) <= set(m), name
    assert len(lines) == 5 and all(line.startswith(name) for line, name in zip(lines, saved["policies"], strict=True))
    p = saved["policies"]
    assert p["flat"]["pnl_usd_mean"] == 0 and p["flat"]["turnover"] == 0 and p["flat"]["max_drawdown_usd"] == 0
    assert p["flat"]["sharpe"] is None and p["flat"]["fill_rate"] is None and "fill_rate_note" in p["flat"]
    assert p["oracle"]["pnl_usd_mean"] > p["random"]["pnl_usd_mean"]
    assert saved["oracle_fraction"] == pytest.approx(p[AGENT]["pnl_usd_mean"] / p["oracle"]["pnl_usd_mean"])
    assert p["random"]["sharpe"] == pytest.approx(p["random"]["pnl_usd_mean"] / p["random"]["pnl_usd_std"])
    assert 0 < p["random"]["fill_rate"] <= 1


def test_every_policy_meets_the_same_episodes(run_dir):
    """The latent regime path is a pure function of a book's seed: identical under every policy, the agent's too."""
    run, _, _ = load_run(run_dir)
    market, seed = run.market, heldout_seed(0)
    obs_dim = LobVectorEnv(1, market).single_observation_space.shape[0]
    agent, _ = load_agent(run_dir / "checkpoints" / "ckpt_00000008.pt", run, obs_dim=obs_dim, n_actions=len(Action))

    def recording(policy, into):
        def act(obs, env, rng):
            into.append(env.latent_regime())
            return policy(obs, env, rng)

        return act

    paths = {}
    for name, policy in {AGENT: agent, **POLICIES}.items():
        paths[name] = []
        run_episodes(market, recording(policy, paths[name]), EPISODES, seed)
    for name, path in paths.items():
        assert np.array_equal(np.array(path), np.array(paths["flat"])), name
    # evaluate_run scores each baseline exactly as evaluate_policy does on the same seed
    result = evaluate_run(run_dir, episodes=EPISODES, write=False)
    for name in POLICIES:
        direct = evaluate_policy(market, name, EPISODES, seed)
        assert {k: direct[k] for k in METRIC_KEYS} == {k: result["policies"][name][k] for k in METRIC_KEYS}, name


def test_heldout_seeds_never_meet_the_training_books(run_dir):
    run, drv, _ = load_run(run_dir)
    B = run.rollout.num_envs
    training = {book_seed(run.seed, w, B) + i for w in range(drv.rollout_workers) for i in range(B)}
    for fold in range(3):
        first = heldout_seed(fold)
        assert training.isdisjoint(range(first, first + HELDOUT_FOLD_STRIDE))
        assert training_overlap(first, HELDOUT_FOLD_STRIDE, run, drv, last_step=10**5) is None
    assert heldout_seed(1) - heldout_seed(0) == HELDOUT_FOLD_STRIDE  # folds' days never share a book
    assert training_overlap(3, 10, run, drv, last_step=8) == 3
    resumed_book = run.seed + 4 * RESUME_SEED_STRIDE + 5  # a run resumed at step 4: its worker books start there
    assert training_overlap(resumed_book - 2, 4, run, drv, last_step=8) == resumed_book - 2
    assert training_overlap(resumed_book + 2 * B, 4, run, drv, last_step=8) is None
    assert training_overlap(resumed_book, 1, run, drv, last_step=3) is None
    with pytest.raises(EvaluationError, match=r"--seed=0: book seed 0 of the evaluation was a training book"):
        evaluate_run(run_dir, episodes=EPISODES, seed=0, write=False)


def test_a_named_checkpoint_is_used_and_acts_as_the_learner_would(run_dir):
    by_step = evaluate_run(run_dir, checkpoint=4, episodes=EPISODES, write=False)
    by_path = evaluate_run(run_dir, checkpoint=run_dir / "checkpoints" / "ckpt_00000004.pt", episodes=4, write=False)
    assert by_step["checkpoint_step"] == by_path["checkpoint_step"] == 4
    assert by_step["checkpoint"].endswith("ckpt_00000004.pt")
    # the greedy agent is exactly the learner's policy at that step (and its q_ens for --policy q)
    run, _, _ = load_run(run_dir)
    env = LobVectorEnv(64, run.market)
    obs, _ = env.reset(seed=5)
    rng = np.random.default_rng(0)
    batch = [obs]
    for _ in range(20):
        obs, *_ = env.step(rng.integers(0, len(Action), 64))
        batch.append(obs)
    obs = np.concatenate(batch)
    ckpt = run_dir / "checkpoints" / "ckpt_00000004.pt"
    learner = Learner(run.learner, obs_dim=obs.shape[1], n_actions=len(Action))
    learner.load_state_dict(torch.load(ckpt, weights_only=True)["learner"])
    for head in ("pi", "q"):
        agent, step = load_agent(ckpt, run, obs_dim=obs.shape[1], n_actions=len(Action), head=head)
        assert step == 4
        if head == "pi":
            expected = policy_from_weights(learner.policy_weights()).act(obs, greedy=True)[0]
        else:
            with torch.no_grad():
                h = learner.net.encoder(torch.as_tensor(obs))
                q = learner.net.q_ens(h, learner.support, run.learner.ensemble_w, run.learner.iqn_taus)
            expected = q.argmax(-1).numpy()
        assert np.array_equal(agent(obs, env, rng), expected), head


def test_target_weights_act_as_the_learner_s_target_network(run_dir, tmp_path):
    """--weights target: the checkpoint's target network (main.target_flat), not the trained parameters. The
    checkpoint's target is moved far from its trained weights first, so that the two act differently."""
    run, _, _ = load_run(run_dir)
    env = LobVectorEnv(256, run.market)
    obs, _ = env.reset(seed=7)
    doc = torch.load(run_dir / "checkpoints" / "ckpt_00000004.pt", weights_only=True)
    main_sd = doc["learner"]["main"]
    noise = torch.randn(main_sd["flat"].shape, generator=torch.Generator().manual_seed(3))
    main_sd["target_flat"] = main_sd["flat"] + noise
    ckpt = tmp_path / "ckpt_00000004.pt"
    torch.save(doc, ckpt)
    learner = Learner(run.learner, obs_dim=obs.shape[1], n_actions=len(Action))
    learner.load_state_dict(doc["learner"])
    with torch.no_grad():
        learner.main.flat.copy_(learner.main.target_flat)  # this learner's trained weights := the target's
    expected = policy_from_weights(learner.policy_weights()).act(obs, greedy=True)[0]
    rng = np.random.default_rng(0)
    target, step = load_agent(ckpt, run, obs_dim=obs.shape[1], n_actions=len(Action), weights="target")
    online, _ = load_agent(ckpt, run, obs_dim=obs.shape[1], n_actions=len(Action))
    assert step == 4
    assert np.array_equal(target(obs, env, rng), expected)
    assert not np.array_equal(online(obs, env, rng), expected)

    result = evaluate_run(run_dir, checkpoint=4, episodes=EPISODES, weights="target", write=False)
    assert result["weights"] == "target" and record_name(result).endswith("-pi-target.json")
    assert "greedy on pi (target weights)" in describe(result)
    assert evaluate_run(run_dir, checkpoint=4, episodes=EPISODES, write=False)["weights"] == "online"
    with pytest.raises(EvaluationError, match=r"--weights='avg' must be one of \['online', 'target'\]"):
        evaluate_run(run_dir, episodes=EPISODES, weights="avg", write=False)


def test_the_command_prints_the_table_and_writes_the_file(run_dir, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main([str(run_dir), "--episodes", "4", "--checkpoint", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    for name in (AGENT, "flat", "random", "imbalance", "oracle"):
        assert f"\n{name} " in printed.out
        assert f"{name} " in printed.err  # a progress line per policy
    assert "oracle fraction" in printed.out and str(out) in printed.out
    doc = json.loads(out.read_text())
    assert doc["checkpoint_step"] == 4 and doc["episodes"] == 4


# ---- the metrics of the one loop --------------------------------------------------------------------------


def test_taker_passive_split_and_fill_rate_add_up():
    """Synthetic fees are taker x taker_fee + |passive| x maker_fee per step: the split must reproduce them."""
    cfg = MarketConfig(horizon=300, maker_fee_usd=-0.25)

    def join_bid(obs, env, rng):
        return np.full(obs.shape[0], Action.JOIN_BID, np.int64)

    joins = run_episodes(cfg, join_bid, 16, 11)
    assert joins.taker_contracts.sum() == 0 and np.array_equal(joins.passive_filled, joins.fills)
    assert (joins.passive_posted >= joins.passive_filled).all() and joins.passive_filled.sum() > 0
    m = joins.metrics()
    assert m["fill_rate"] == joins.passive_filled.sum() / joins.passive_posted.sum()
    assert 0 < m["fill_rate"] <= 1
    for name in ("random", "imbalance", "oracle"):
        r = run_episodes(cfg, POLICIES[name], 16, 11)
        fees = r.taker_contracts * cfg.taker_fee_usd + r.passive_filled * cfg.maker_fee_usd
        assert np.allclose(r.fees_usd, fees), name
        assert (r.max_drawdown_usd >= np.maximum(0, -r.pnl_usd) - 1e-9).all(), name
        assert r.metrics()["turnover"] == (r.taker_contracts + r.passive_filled).mean()
    market_only = run_episodes(cfg, POLICIES["oracle"], 16, 11)
    assert market_only.passive_posted.sum() == 0 and market_only.metrics()["fill_rate"] is None


def test_episodes_below_one_are_refused_by_the_loop():
    with pytest.raises(ValueError, match=r"episodes=0 must be an int >= 1"):
        run_episodes(MarketConfig(horizon=5), POLICIES["flat"], 0, 1)


@pytest.mark.parametrize(
    ("args", "kw", "message"),
    [
        ((POLICIES["flat"], True, 1), {}, "episodes=True must be an int >= 1 (one book per episode)"),
        ((POLICIES["flat"], 2.0, 1), {}, "episodes=2.0 must be an int >= 1 (one book per episode)"),
        ((POLICIES["flat"], 2, -1), {}, "seed=-1 must be an int >= 0"),
        ((POLICIES["flat"], 2, "1"), {}, "seed='1' must be an int >= 0"),
        ((POLICIES["flat"], 2, 1), {"rng_seed": -3}, "rng_seed=-3 must be None or an int >= 0 (None: use seed)"),
        (("flat", 2, 1), {}, "policy='flat' must be a callable policy(obs, env, rng) -> actions"),
    ],
)
def test_the_loop_names_a_bad_argument_and_what_it_must_be(args, kw, message):
    """run_episodes words its argument errors as every config does (lobsim_env.validation): an InputError."""
    with pytest.raises(InputError) as err:
        run_episodes(MarketConfig(horizon=5), *args, **kw)
    assert str(err.value).startswith(message)
    with pytest.raises(InputError, match=r"^policy_name='best' must be one of \['flat', 'random', 'imbalance'"):
        evaluate_policy(MarketConfig(horizon=5), "best", 2, 1)


def test_numpy_integer_seeds_are_seeds():
    a = run_episodes(MarketConfig(horizon=20), POLICIES["random"], 3, np.int64(4), rng_seed=np.uint32(9))
    b = run_episodes(MarketConfig(horizon=20), POLICIES["random"], 3, 4, rng_seed=9)
    assert a.seed == 4 and np.array_equal(a.pnl_usd, b.pnl_usd) and np.array_equal(a.passive_posted, b.passive_posted)


# ---- LOBSTER ------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not AMZN_1.exists(), reason="LOBSTER sample data not present")
def test_the_loop_splits_taker_and_passive_on_a_lobster_day():
    """The same split through the LOBSTER market's action_listener: a bid-only joiner takes nothing at market and
    pays the maker fee on what its bids filled; a market-order policy posts nothing."""
    cfg = lobster_config(str(AMZN_1), horizon=100)

    def join_bid(obs, env, rng):
        return np.full(obs.shape[0], Action.JOIN_BID, np.int64)

    joins = run_episodes(cfg, join_bid, 6, 3)
    assert joins.taker_contracts.sum() == 0 and np.array_equal(joins.passive_filled, joins.fills)
    assert joins.passive_posted.sum() >= joins.passive_filled.sum() > 0
    assert np.allclose(joins.fees_usd, joins.passive_filled * cfg.maker_fee_usd)
    market_only = run_episodes(cfg, POLICIES["imbalance"], 6, 3)
    assert market_only.passive_posted.sum() == 0 and market_only.taker_contracts.sum() > 0
    assert np.allclose(market_only.fees_usd, market_only.taker_contracts * cfg.taker_fee_usd)


@pytest.mark.skipif(not AMZN_1.exists(), reason="LOBSTER sample data not present")
def test_evaluation_on_a_lobster_day(run_dir, tmp_path):
    out = tmp_path / "lobster.json"
    result = evaluate_run(run_dir, episodes=EPISODES, lobster_path=AMZN_1, horizon=100, out=out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["market"] == "lobster" and result["horizon"] == 100 and result["held_out"]
    day = result["lobster"]
    assert (day["file"], day["symbol"], day["date"], day["levels"]) == (AMZN_1.name, "AMZN", "2012-06-21", 1)
    for words in ("no oracle", "one day", "out of the training distribution", "synthetic market"):
        assert words in result["caveat"], words
    assert list(result["policies"]) == [AGENT, "flat", "random", "imbalance"]  # no latent regime, no oracle
    assert result["oracle_fraction"] is None
    for m in result["policies"].values():
        assert set(METRIC_KEYS) <= set(m)
    assert result["policies"]["flat"]["pnl_usd_mean"] == 0
    assert result["policies"]["random"]["turnover"] > 0
    assert not (run_dir / "lobster.json").exists()


@pytest.mark.skipif(not AMZN_1.exists(), reason="LOBSTER sample data not present")
def test_a_lobster_day_keeps_its_own_record_beside_the_synthetic_one_and_the_report_tells_them_apart(
    run_dir, tmp_path, capsys
):
    """Issue 13 item 5: `evaluate --lobster` used to overwrite the synthetic evaluation.json without a word."""
    run = _copy(run_dir, tmp_path)
    assert main([str(run), "--episodes", "4", "--quiet"]) == 0
    synthetic_out = capsys.readouterr().out
    assert "market synthetic, fold 0 held-out day, 4 episodes" in synthetic_out and "caveat" not in synthetic_out
    legacy = (run / "evaluation.json").read_bytes()
    assert main([str(run), "--episodes", "4", "--lobster", str(AMZN_1), "--horizon", "50", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "market LOBSTER day AMZN 2012-06-21" in out
    caveat = next(line for line in out.splitlines() if line.startswith("caveat: "))
    for words in ("no oracle", "one day", "out of the training distribution"):
        assert words in caveat, words
    assert "evaluation.json, the newest synthetic evaluation, is left as it was" in out
    assert (run / "evaluation.json").read_bytes() == legacy  # the synthetic evaluation is not overwritten
    records = sorted(p.name for p in (run / "evaluations").iterdir())
    assert records == [
        "lobster-LOBSTER_SampleFile_AMZN_2012-06-21_1-step00000008-4ep-h50-pi.json",
        f"synthetic-fold0-step00000008-4ep-h{json.loads(legacy)['horizon']}-pi.json",
    ]
    assert all(f"wrote {run / 'evaluations' / name}" in out or name.startswith("synthetic") for name in records)

    loaded = report.load_run(run)
    report.label_runs([loaded])
    assert [ev.market for ev in loaded.evaluations] == ["lobster", "synthetic"]
    assert loaded.evaluation == json.loads(legacy)  # the runs table's held-out columns: the synthetic one only
    runs_row = report.table_rows([loaded], [1])[0]
    assert runs_row["eval_pnl_usd"] == json.loads(legacy)["policies"]["agent"]["pnl_usd_mean"]
    table, _, notes = report.evaluations_table([loaded]).partition("\n\n")
    head, _, *rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in table.splitlines()]
    rows = [dict(zip(head, row, strict=True)) for row in rows]
    assert [(r["market"], r["fold / day"], r["ckpt"]) for r in rows] == [
        ("synthetic", "fold 0 held-out", "8"),
        ("LOBSTER (real day)", "AMZN 2012-06-21", "8"),
    ]
    assert rows[1]["oracle PnL"] == rows[1]["oracle fraction"] == "no oracle"
    assert rows[1]["caveat"] == "⚠ no oracle · one day · outside the training distribution"
    assert rows[0]["caveat"] == "" and rows[0]["oracle PnL"].startswith("$")
    assert "not comparable" in notes and "no oracle" in notes and "one day" in notes
    # the markdown report carries the same table and notes
    (md,) = [p for p in report.write_report([loaded], tmp_path / "rep", log=lambda _: None) if p.suffix == ".md"]
    assert table in md.read_text() and "out of the training distribution" in md.read_text()


def test_a_damaged_record_is_left_alone_and_named_by_the_report(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path)
    (run / "evaluations").mkdir()
    damaged = run / "evaluations" / "synthetic-fold0-step00000004-2ep-h9-pi.json"
    damaged.write_text("{half a rec")
    assert main([str(run), "--episodes", "2", "--quiet"]) == 0
    assert damaged.read_text() == "{half a rec"  # a new evaluation never touches another record
    assert len(list((run / "evaluations").iterdir())) == 2
    with pytest.raises(report.ReportError) as err:
        report.load_run(run)
    assert str(damaged) in str(err.value) and "not a readable evaluation record" in str(err.value)
    assert "re-run python -m foxhunt_ray.evaluate" in str(err.value) and "move the file out of" in str(err.value)
    damaged.write_text(json.dumps({"market": "mars", "policies": {}}))
    with pytest.raises(report.ReportError, match=r"market='mars' is neither 'synthetic' nor 'lobster'"):
        report.load_run(run)


# ---- bad input ----------------------------------------------------------------------------------------------


def _fails(argv: list[str], capsys, *needles: str) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    return err


def test_a_folder_without_config_or_checkpoints(tmp_path, run_dir, capsys):
    _fails([str(tmp_path / "nope")], capsys, "is not a folder")
    empty = tmp_path / "empty"
    empty.mkdir()
    _fails([str(empty)], capsys, "config.json does not exist", "foxhunt_ray.local")
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(run_dir / "config.json", bare / "config.json")
    _fails([str(bare)], capsys, "holds no checkpoint")
    (bare / "config.json").write_text("{not json")
    _fails([str(bare)], capsys, "config.json is unreadable")
    assert sorted(p.name for p in bare.iterdir()) == ["config.json"]


def test_bad_checkpoints_change_nothing_in_the_run_folder(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path)
    ckpt = run / "checkpoints" / "ckpt_00000008.pt"
    _fails([str(run), "--checkpoint", "7"], capsys, "--checkpoint=7", "steps [4, 8]")
    good = ckpt.read_bytes()
    for damaged in (b"not a checkpoint at all", good[: len(good) // 2]):
        ckpt.write_bytes(damaged)
        before = _snapshot(run)
        _fails([str(run), "--episodes", "2"], capsys, "cannot read checkpoint", "ckpt_00000008.pt", "--checkpoint")
        assert _snapshot(run) == before
    torch.save({"format": "something/else"}, ckpt)
    _fails([str(run)], capsys, "is not a run checkpoint")
    ckpt.write_bytes(good)
    # the newest checkpoint is fine again, the older one still evaluates by name
    assert main([str(run), "--episodes", "2", "--checkpoint", "4", "--quiet"]) == 0


def test_a_checkpoint_that_does_not_match_the_config(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path)
    doc = json.loads((run / "config.json").read_text())
    doc["run"]["learner"]["hidden_dim"] = 16
    (run / "config.json").write_text(json.dumps(doc))
    before = _snapshot(run)
    _fails([str(run)], capsys, "hidden_dim=32 (config.json: 16)", "the run folder it came from")
    assert _snapshot(run) == before
    doc["run"]["learner"]["hidden_dim"] = 32
    doc["run"]["market"]["obs_levels"] = doc["run"]["market"]["obs_levels"] - 1
    (run / "config.json").write_text(json.dumps(doc))
    _fails([str(run)], capsys, "trained on obs_dim=", "the observation has changed")


def test_bad_options(run_dir, tmp_path, capsys):
    before = _snapshot(run_dir)
    _fails([str(run_dir), "--episodes", "0"], capsys, "--episodes=0 must be an int in 1..")
    _fails([str(run_dir), "--episodes", "0", "--horizon", "0"], capsys, "--episodes=0", "--horizon=0")
    _fails([str(run_dir), "--lobster", str(tmp_path / "missing.zip")], capsys, "--lobster=", "is not a file")
    if AMZN_1.exists():
        _fails([str(run_dir), "--lobster", str(AMZN_1), "--horizon", "100000"], capsys, "--horizon", "messages")
    assert _snapshot(run_dir) == before
    for usage in (["--episodes", "many"], ["--policy", "v"], []):
        with pytest.raises(SystemExit) as exc:
            main([str(run_dir), *usage] if usage else usage)
        assert exc.value.code == 2
    with pytest.raises(EvaluationError, match=r"--fold=-1 must be an int >= 0"):
        evaluate_run(run_dir, fold=-1, write=False)


def test_a_run_of_the_lobster_market_needs_a_day_to_evaluate_on(run_dir, tmp_path, capsys):
    run = _copy(run_dir, tmp_path)
    doc = json.loads((run / "config.json").read_text())
    doc["run"]["market"] = {
        **doc["run"]["market"],
        **dataclasses.asdict(MarketConfig(source="lobster", lobster_path=str(AMZN_1))),
    }
    (run / "config.json").write_text(json.dumps(doc))
    _fails([str(run)], capsys, "trained on the LOBSTER day", "--lobster PATH")


@pytest.mark.skipif(not AMZN_1.exists(), reason="LOBSTER sample data not present")
def test_a_lobster_day_is_observed_as_the_policy_was_trained():
    """A policy trained with the depth flow (34 columns) is played on a replayed day with the same columns."""
    from foxhunt_ray.config import RunConfig
    from lobsim_env.market import obs_size

    for ticks, levels in ((0, 5), (5, 5), (3, 2)):
        trained = RunConfig(market=MarketConfig(depth_flow_ticks=ticks, obs_levels=levels))
        market, kind = evaluation_market(trained, AMZN_1, 100)
        assert kind == "lobster" and (market.depth_flow_ticks, market.obs_levels) == (ticks, levels)
        assert obs_size(market) == obs_size(trained.market) == LobVectorEnv(1, market).single_observation_space.shape[0]
