"""How much a run's greedy policy moves between checkpoints, and what picking or averaging them buys.

Two steps, for a run of `python -m foxhunt_ray.local` (which keeps only its newest two checkpoints):

    python benchmarks/snapshot_eval.py watch OUT --every 10 --snapshots SNAPDIR &   # while the run trains
    python benchmarks/snapshot_eval.py eval RUN_DIR --snapshots SNAPDIR --episodes 256 --json out.json

`watch` copies the online and target parameters of the run's newest checkpoint every `--every` seconds into
SNAPDIR/snap_<step>.pt (a few MB each; the replay is never read), until the run folder's summary.json appears.
`eval` plays every snapshot greedily (argmax of the policy head, as foxhunt_ray.evaluate does) on two disjoint
sets of episodes the run never trained on: a validation set (fold `--val-fold`'s held-out day, default 1) and
the test set (the run's own fold, what the main job reports). Beside them: the oracle and imbalance on both
sets, and these ways of turning several snapshots into one policy, each scored on the test set:
- `last`: the newest snapshot (what the main job evaluates, up to the few updates between them);
- `val_best`: the snapshot of the last half with the best validation PnL (model selection on validation);
- `mean_last_half`: the average test PnL of the last half's snapshots (what a random stopping point gives);
- `ensemble_K`: the greedy action of the mean of the last K snapshots' policy probabilities;
- `weight_avg_K`: one policy whose parameters are the mean of the last K snapshots'.

    python benchmarks/snapshot_eval.py runs RUN_DIR RUN_DIR ... --episodes 256 --json out.json

`runs` does the same across runs (other seeds, say): each run's newest checkpoint alone, and the greedy action of
the mean of their policy probabilities, on the same two sets of episodes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from actors.checkpoints import latest_checkpoint, read_checkpoint  # noqa: E402
from foxhunt_ray.evaluate import evaluation_market, load_run, networks_from_flat  # noqa: E402
from learner.network import PolicyNet  # noqa: E402
from lobsim_env.baselines import POLICIES, run_episodes  # noqa: E402
from lobsim_env.env import LobVectorEnv  # noqa: E402
from lobsim_env.seeds import heldout_seed  # noqa: E402

SNAP_PREFIX = "snap_"
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
"""Where the snapshots' policies run (the env steps on the CPU either way)."""


def take_snapshot(checkpoint: Path, snapshots: Path) -> Path:
    """Writes SNAPSHOTS/snap_<step>.pt: the step, the online and target flat parameters of a run checkpoint and
    its encoder's standardisation (learner.obs_norm; None when off)."""
    state = read_checkpoint(checkpoint, mmap=True)
    main, step = state["learner"]["main"], int(state["step"])
    norm = state["learner"].get("obs_norm")
    path = snapshots / f"{SNAP_PREFIX}{step:08d}.pt"
    snap = {"step": step, "flat": main["flat"].clone(), "target_flat": main["target_flat"].clone()}
    torch.save({**snap, "obs_norm": {k: v.clone() for k, v in norm.items()} if norm else None}, path)
    return path


def watch(out: Path, every: float, snapshots: Path, timeout: float) -> int:
    """Copies the newest checkpoint's parameters of the (one) run under `out` every `every` s until it ends."""
    snapshots.mkdir(parents=True, exist_ok=True)
    start, taken = time.monotonic(), set()
    while time.monotonic() - start < timeout:
        runs = [p.parent.parent for p in out.glob("**/checkpoints/ckpt_*.pt")]
        run = runs[0] if runs else None
        if run is not None and (found := latest_checkpoint(run)) is not None and found[0] not in taken:
            step, path = found
            try:
                take_snapshot(path, snapshots)
                taken.add(step)
            except Exception as err:  # the file was rotated away while read: take the next one
                print(f"snapshot of step {step} skipped: {err}", flush=True)
        if run is not None and (run / "summary.json").exists():
            break
        time.sleep(every)
    print(f"{len(taken)} snapshots in {snapshots}", flush=True)
    return 0


def _policy(flat: torch.Tensor, run, obs_dim: int, n_actions: int, obs_norm: dict | None = None) -> PolicyNet:
    """The encoder + policy head of the main network whose flat parameters are `flat` (and whose encoder
    standardises by `obs_norm`, learner.obs_norm's entry of its checkpoint), on DEVICE."""
    return networks_from_flat(flat, run.learner, obs_dim, n_actions, obs_norm=obs_norm)[1].to(DEVICE)


def _greedy(policies: list[PolicyNet]):
    """Greedy action of the mean policy probabilities of `policies` (one policy: its argmax logit)."""

    @torch.no_grad()
    def act(obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
        x = torch.as_tensor(obs, dtype=torch.float32, device=DEVICE)
        if len(policies) == 1:
            return policies[0](x).argmax(-1).cpu().numpy().astype(np.int64)
        probs = torch.stack([p(x).softmax(-1) for p in policies]).mean(0)
        return probs.argmax(-1).cpu().numpy().astype(np.int64)

    return act


def _episode_sets(run_dir: Path, val_fold: int):
    """(run, driver, market, obs_dim, n_actions, sets): a run's config, its evaluation market and sizes, and the
    first book seeds of the validation day (fold `val_fold`) and the test day (the run's own fold)."""
    run, driver, _ = load_run(run_dir)
    if val_fold == driver.fold:
        raise SystemExit(f"--val-fold={val_fold} is the run's own fold, the test set: pick another")
    market, _ = evaluation_market(run, None, None)
    env = LobVectorEnv(1, market)
    obs_dim, n_actions = int(env.single_observation_space.shape[0]), int(env.single_action_space.n)
    return run, driver, market, obs_dim, n_actions, {"val": heldout_seed(val_fold), "test": heldout_seed(driver.fold)}


def _score(market, policy, episodes: int, sets: dict[str, int]) -> dict[str, float]:
    """Mean PnL and its standard error of `policy` on each set's `episodes` episodes (keys NAME and NAME_sem)."""
    out = {}
    for name, seed in sets.items():
        m = run_episodes(market, policy, episodes, seed).metrics()
        out[name], out[name + "_sem"] = float(m["pnl_usd_mean"]), float(m["pnl_usd_sem"])
    return out


def evaluate(run_dir: Path, snapshots: Path, episodes: int, val_fold: int, ks: list[int]) -> dict:
    run, _, market, obs_dim, n_actions, sets = _episode_sets(run_dir, val_fold)
    files = sorted(snapshots.glob(f"{SNAP_PREFIX}*.pt"))
    if not files:
        raise SystemExit(f"no {SNAP_PREFIX}*.pt in {snapshots}: run `watch` beside the training run")
    snaps = [torch.load(f, weights_only=True) for f in files]

    def score(policy) -> dict[str, float]:
        return _score(market, policy, episodes, sets)

    t0 = time.perf_counter()
    refs = {name: score(POLICIES[name]) for name in ("oracle", "imbalance")}
    rows = []
    for s in snaps:
        r = {"step": int(s["step"]), **score(_greedy([_policy(s["flat"], run, obs_dim, n_actions, s.get("obs_norm"))]))}
        rows.append(r)
        print(f"step {r['step']:>7}  val {r['val']:>8.0f}  test {r['test']:>8.0f}", flush=True)
    half = rows[len(rows) // 2 :]
    best = max(half, key=lambda r: r["val"])
    combos = {
        "last": rows[-1]["test"],
        "val_best": best["test"],
        "mean_last_half": float(np.mean([r["test"] for r in half])),
    }
    for k in ks:
        if k > len(snaps):
            continue
        last_k = snaps[-k:]
        pols = [_policy(s["flat"], run, obs_dim, n_actions, s.get("obs_norm")) for s in last_k]
        combos[f"ensemble_{k}"] = score(_greedy(pols))["test"]
        avg = torch.stack([s["flat"] for s in last_k]).mean(0)
        combos[f"weight_avg_{k}"] = score(_greedy([_policy(avg, run, obs_dim, n_actions, last_k[-1].get("obs_norm"))]))[
            "test"
        ]
    oracle = refs["oracle"]["test"]
    return {
        "run_dir": str(run_dir),
        "episodes": episodes,
        "sets": sets,
        "references": refs,
        "snapshots": rows,
        "val_best_step": best["step"],
        "test_pnl": combos,
        "test_fraction_of_oracle": {k: v / oracle for k, v in combos.items()},
        "seconds": round(time.perf_counter() - t0, 1),
    }


def across_runs(run_dirs: list[Path], episodes: int, val_fold: int) -> dict:
    """Each run's newest checkpoint alone, and the mean of their policy probabilities, on the validation and
    test sets of the first run's fold (every run must share its market and fold)."""
    run, driver, market, obs_dim, n_actions, sets = _episode_sets(run_dirs[0], val_fold)
    policies, rows = [], []
    for rd in run_dirs:
        r, d, _ = load_run(rd)
        if r.market != run.market or d.fold != driver.fold:
            raise SystemExit(f"{rd}: another market or fold than {run_dirs[0]}; compare runs of one market and fold")
        found = latest_checkpoint(rd)
        if found is None:
            raise SystemExit(f"{rd}: no checkpoint")
        saved = read_checkpoint(found[1], mmap=True)["learner"]
        flat, norm = saved["main"]["flat"], saved.get("obs_norm")
        policies.append(networks_from_flat(flat, r.learner, obs_dim, n_actions, obs_norm=norm)[1].to(DEVICE))
        rows.append({"run_dir": str(rd), "seed": r.seed, "step": found[0]})

    def score(policy) -> dict[str, float]:
        return _score(market, policy, episodes, sets)

    refs = {name: score(POLICIES[name]) for name in ("oracle", "imbalance")}
    for row, pol in zip(rows, policies, strict=True):
        row.update(score(_greedy([pol])))
        print(f"seed {row['seed']} step {row['step']}: val {row['val']:.0f} test {row['test']:.0f}", flush=True)
    ensemble = score(_greedy(policies))
    return {
        "episodes": episodes,
        "sets": sets,
        "references": refs,
        "runs": rows,
        "ensemble": ensemble,
        "test_fraction_of_oracle": {
            "runs": [r["test"] / refs["oracle"]["test"] for r in rows],
            "mean_of_runs": float(np.mean([r["test"] for r in rows])) / refs["oracle"]["test"],
            "ensemble": ensemble["test"] / refs["oracle"]["test"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch", help="copy the newest checkpoint's parameters while a run trains")
    w.add_argument("out", type=Path, help="the run's --out folder (one run under it)")
    w.add_argument("--snapshots", type=Path, required=True)
    w.add_argument("--every", type=float, default=10.0)
    w.add_argument("--timeout", type=float, default=3600.0)
    e = sub.add_parser("eval", help="score every snapshot, and ways of combining them")
    e.add_argument("run_dir", type=Path)
    e.add_argument("--snapshots", type=Path, required=True)
    e.add_argument("--episodes", type=int, default=256)
    e.add_argument("--val-fold", type=int, default=1)
    e.add_argument("--ensemble", type=int, nargs="*", default=[4, 8])
    e.add_argument("--json", type=Path)
    r = sub.add_parser("runs", help="several runs' newest checkpoints alone and as one ensemble")
    r.add_argument("run_dirs", type=Path, nargs="+")
    r.add_argument("--episodes", type=int, default=256)
    r.add_argument("--val-fold", type=int, default=1)
    r.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "watch":
        return watch(args.out, args.every, args.snapshots, args.timeout)
    torch.set_num_threads(max(1, min(8, torch.get_num_threads())))
    if args.cmd == "runs":
        result = across_runs(args.run_dirs, args.episodes, args.val_fold)
        f = result["test_fraction_of_oracle"]
        print(
            f"of the oracle on the test set: runs {', '.join(f'{x:.3f}' for x in f['runs'])} (mean "
            f"{f['mean_of_runs']:.3f}); ensemble {f['ensemble']:.3f}"
        )
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return 0
    result = evaluate(args.run_dir, args.snapshots, args.episodes, args.val_fold, args.ensemble)
    oracle = result["references"]["oracle"]
    print(
        f"oracle val {oracle['val']:.0f} test {oracle['test']:.0f}; imbalance test "
        f"{result['references']['imbalance']['test']:.0f}"
    )
    for k, v in result["test_pnl"].items():
        print(f"{k:<16} test {v:>8.0f}  {result['test_fraction_of_oracle'][k]:.3f} of the oracle")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
