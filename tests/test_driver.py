"""The driver end to end on the smoke preset: serial mode (every kill rule, refusals, resume, Ctrl-C) and Ray
mode in-process (the same run through actors; a rollout actor killed mid-run is restarted)."""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import pytest

from actors.checkpoints import list_checkpoints
from actors.diag_file import read_diag, step_records
from foxhunt_ray import driver, provenance

SMOKE = ["--preset", "smoke", "--quiet", "--checkpoint-interval-s", "0"]
QPA_FAST = ["--set", "kill.qpa_warmup_steps=30", "--set", "kill.qpa_ema_decay=0.9", "--set", "learner.distill_coef=1.0"]


def run(tmp_path: Path, *flags: str, serial: bool = True, **kw) -> tuple[int, Path]:
    argv = [*SMOKE, "--out", str(tmp_path / "runs"), *(["--serial"] if serial else []), *flags]
    code = driver.main(argv, **kw)
    # globbed, not rebuilt from code_sha(): a commit during the run must not move the folder the test reads
    found = sorted((tmp_path / "runs").glob("*/*/0"))
    return code, found[0] if found else tmp_path / "runs" / provenance.code_sha() / "none" / "0"


def lines(run_dir: Path) -> list[dict]:
    raw = (run_dir / "diag.jsonl").read_text().splitlines()
    return [json.loads(line) for line in raw]  # every line is strict JSON


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def assert_steps(run_dir: Path, last: int) -> list[dict]:
    steps = [r for r in lines(run_dir) if "event" not in r]
    assert [r["step"] for r in steps] == list(range(1, last + 1))
    return steps


def test_serial_smoke_run(tmp_path):
    code, run_dir = run(tmp_path, "--steps", "120", "--checkpoint-every", "40")
    assert code == 0
    steps = assert_steps(run_dir, 120)
    sha = run_dir.parents[1].name  # OUT/<code_sha>/<name>/<fold>
    assert sha.startswith(provenance.code_sha().split("-")[0][:8])  # a git commit here (or content hash)
    assert all(r["code_sha"] == sha and r["preset"] == "smoke" and r["fold"] == 0 for r in steps)
    assert steps[-1]["env_steps"] == 120 * 4 * 16  # smoke: 4 books x 16 steps per batch
    assert {r["worker_index"] for r in steps} == {0, 1}
    assert all(r["policy_lag"] <= 4 for r in steps)  # broadcast every 4 updates
    s = summary(run_dir)
    assert s["status"] == "done" and s["exit_code"] == 0 and s["step"] == 120
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["code_sha"] == sha and cfg["run"]["preset"] == "smoke" and cfg["driver"]["steps"] == 120
    assert [s for s, _ in list_checkpoints(run_dir)] == [80, 120]  # the newest two


def test_time_limit_ends_the_run_done_with_a_checkpoint(tmp_path, monkeypatch):
    """--time-limit-s: no update starts after the budget; the run ends 'done' at the step it reached, with a
    checkpoint there and its diag lines 1..that step. The clock is the loop's: a fake one makes it exact."""
    from foxhunt_ray import loops

    clock = iter(range(10**6))  # every read of the loop's clock advances one 'second'
    monkeypatch.setattr(loops.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(driver.time, "monotonic", lambda: float(next(clock)))
    code, run_dir = run(tmp_path, "--steps", "1000", "--time-limit-s", "20")
    assert code == 0
    s = summary(run_dir)
    assert s["status"] == "done" and 5 <= s["step"] < 1000  # the loop stopped on the clock, not on --steps
    assert_steps(run_dir, s["step"])
    assert list_checkpoints(run_dir)[-1][0] == s["step"]
    assert json.loads((run_dir / "config.json").read_text())["driver"]["time_limit_s"] == 20.0


def test_bad_time_limit_is_refused(tmp_path, capsys):
    code, _ = run(tmp_path, "--steps", "10", "--time-limit-s", "-1")
    assert code == 1
    assert "driver.time_limit_s=-1.0 must be a number of seconds >= 0" in capsys.readouterr().err


def test_inject_nan_is_killed_by_the_non_finite_rule(tmp_path, capsys):
    code, run_dir = run(tmp_path, "--steps", "200", "--inject-nan-at", "50")
    assert code == 3
    recs = lines(run_dir)
    assert recs[-1]["event"] == "kill" and recs[-1]["rule"] == "non_finite" and recs[-1]["step"] == 50
    assert recs[-2]["step"] == 50 and recs[-2]["nan_abort_step"] == 50
    s = summary(run_dir)
    assert s["status"] == "killed" and s["rule"] == "non_finite" and s["exit_code"] == 3
    assert [s for s, _ in list_checkpoints(run_dir)] == [50]  # a kill keeps a checkpoint
    assert "killed by rule non_finite at update 50" in capsys.readouterr().err


def test_flipped_distillation_is_killed_by_the_qpa_rule(tmp_path):
    code, run_dir = run(tmp_path, "--steps", "400", "--flip-distill-sign", *QPA_FAST)
    assert code == 3
    s = summary(run_dir)
    assert s["rule"] == "qpa_collapse" and 30 < s["step"] < 400 and s["values"]["qpa_ema"] < -0.3


def test_same_settings_without_the_flip_are_not_killed(tmp_path):
    # the control of the test above: the qpa rule fires because of the flip, not because of the settings
    code, run_dir = run(tmp_path, "--steps", "200", *QPA_FAST)
    assert code == 0 and summary(run_dir)["status"] == "done"


def test_pnl_deficit_against_a_baseline(tmp_path):
    base = tmp_path / "baseline"
    base.mkdir()
    with open(base / "diag.jsonl", "w") as f:
        for step in range(1, 101):
            f.write(json.dumps({"step": step, "l_c51": 1.0, "pnl_cum_usd": 1e9}) + "\n")
    code, run_dir = run(tmp_path, "--steps", "100", "--baseline", str(base), "--set", "kill.pnl_deficit_usd=1e6")
    assert code == 3
    s = summary(run_dir)
    assert s["rule"] == "pnl_deficit" and s["step"] == 1 and s["values"]["baseline_pnl_cum_usd"] == 1e9
    assert json.loads((run_dir / "config.json").read_text())["baseline"] == str(base)


def test_bad_baseline_is_refused_before_the_run(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "diag.jsonl").write_text("")
    code, run_dir = run(tmp_path, "--steps", "5", "--baseline", str(tmp_path / "empty"))
    assert code == 1 and "has no step lines" in capsys.readouterr().err and not run_dir.exists()
    code, _ = run(tmp_path, "--steps", "5", "--baseline", str(tmp_path / "missing"))
    assert code == 1 and "cannot read diag file" in capsys.readouterr().err


def test_dueling_explosion(tmp_path):
    code, run_dir = run(tmp_path, "--steps", "100", "--set", "kill.dueling_ratio_max=1e-6")
    assert code == 3
    s = summary(run_dir)
    assert s["rule"] == "dueling_explosion" and s["values"]["reference_source"] == "own running mean of l_c51"


def test_wrong_code_sha_is_refused(tmp_path, capsys):
    code, run_dir = run(tmp_path, "--steps", "10", "--expect-code-sha", "wrong")
    assert code == 1
    err = capsys.readouterr().err
    assert "refusing to start: --expect-code-sha=wrong" in err and provenance.code_sha() in err
    assert not run_dir.exists()


def test_content_hash_is_accepted_as_expected_sha(tmp_path):
    code, _ = run(tmp_path, "--steps", "2", "--expect-code-sha", provenance.content_sha())
    assert code == 0


def test_config_errors_are_named_together(tmp_path, capsys):
    code, run_dir = run(tmp_path, "--set", "learner.lr=-1", "--envs-per-worker", "0", "--steps", "0")
    assert code == 1
    err = capsys.readouterr().err
    assert "learner.lr=-1" in err and "rollout.num_envs=0" in err and "driver.steps=0" in err
    assert not run_dir.exists()


def test_two_runs_of_the_same_code_and_fold_live_side_by_side(tmp_path, capsys):
    """Issue 15 item 2: a second run of the same code, preset, env, seed and fold gets its own folder (the name
    made from them and the start time; a suffix within the same second), runs/latest points at the newer one; a
    --name that already holds a run is refused, naming the resume and the fix."""
    assert run(tmp_path, "--steps", "2")[0] == 0
    assert run(tmp_path, "--steps", "2")[0] == 0
    first, second = sorted((tmp_path / "runs").glob("*/*/0"), key=lambda p: p.stat().st_mtime_ns)
    assert first != second and first.parents[1] == second.parents[1]  # one <code_sha> folder, two names
    assert second.parent.name.startswith("smoke-LOB-v0-s0-")
    assert assert_steps(first, 2) and assert_steps(second, 2)
    latest = tmp_path / "runs" / "latest"
    assert latest.is_symlink() and latest.resolve() == second.resolve()
    assert json.loads((second / "config.json").read_text())["driver"]["name"] == second.parent.name
    assert run(tmp_path, "--steps", "2", "--name", "exp1")[0] == 0
    named = tmp_path / "runs" / first.parents[1].name / "exp1" / "0"
    assert latest.resolve() == named.resolve()
    capsys.readouterr()
    assert run(tmp_path, "--steps", "2", "--name", "exp1")[0] == 1
    err = capsys.readouterr().err
    assert f"run folder {named} already holds a run: continue it with --resume {named}" in err
    assert "pick another --name, --out or --fold" in err


def test_resume_continues_without_gaps_or_duplicates(tmp_path):
    code, run_dir = run(tmp_path, "--steps", "60", "--checkpoint-every", "25")
    assert code == 0 and [s for s, _ in list_checkpoints(run_dir)] == [50, 60]
    # a crash after step 60's checkpoint went missing and mid-way through a diag line
    (run_dir / "checkpoints" / "ckpt_00000060.pt").unlink()
    with open(run_dir / "diag.jsonl", "a") as f:
        f.write('{"step": 61, "l_c')
    before = {r["step"]: r for r in step_records(read_diag(run_dir / "diag.jsonl"))}
    assert driver.main(["--resume", str(run_dir), "--steps", "90", "--serial", "--quiet"]) == 0
    steps = assert_steps(run_dir, 90)
    assert [r["env_steps"] for r in steps[:50]] == [before[s]["env_steps"] for s in range(1, 51)]
    assert steps[50]["env_steps"] == steps[49]["env_steps"] + 64  # totals restored from the checkpoint
    assert summary(run_dir)["status"] == "done" and summary(run_dir)["step"] == 90


def test_resume_refuses_config_flags(tmp_path, capsys):
    _, run_dir = run(tmp_path, "--steps", "2")
    assert driver.main(["--resume", str(run_dir), "--set", "learner.lr=1e-3", "--serial"]) == 1
    assert "drop ['--set']" in capsys.readouterr().err


def test_ctrl_c_stops_cleanly_and_keeps_a_checkpoint(tmp_path):
    def interrupt(step, workers):
        if step == 30:
            raise KeyboardInterrupt

    code, run_dir = run(tmp_path, "--steps", "100", hook=interrupt)
    assert code == 0
    assert summary(run_dir)["status"] == "stopped" and summary(run_dir)["step"] == 30
    assert [s for s, _ in list_checkpoints(run_dir)] == [30]


# ---------------------------------------------------------------- Ray mode, in-process


def test_ray_smoke_run(tmp_path, ray_local, monkeypatch):
    import ray

    from foxhunt_ray import remote

    monitors = []

    class SpyHandle(remote.MonitorHandle):  # the driver's side; the Monitor itself runs in its own actor
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            monitors.append(self)

        def close(self):  # what the monitor's process imported, asked before close() ends it
            self.modules = ray.get(self.actor.__ray_call__.remote(lambda _: sorted(sys.modules)))
            super().close()

    monkeypatch.setattr(remote, "MonitorHandle", SpyHandle)
    code, run_dir = run(tmp_path, "--steps", "100", "--checkpoint-every", "50", serial=False)
    assert code == 0
    assert len(monitors) == 1 and monitors[0].last["step"] == 100 and monitors[0].exit_code == 0
    # the monitor recorded 100 diags and wrote two checkpoints without torch (foxhunt_ray.monitor_actor)
    assert "actors.monitor" in monitors[0].modules and "torch" not in monitors[0].modules
    steps = assert_steps(run_dir, 100)
    assert {r["worker_index"] for r in steps} == {0, 1}
    assert summary(run_dir)["status"] == "done"
    # the periodic one at the first learner call that passes step 50 (a call trains on up to 2 payloads here, once
    # past the start, when the payloads made while the learner actor started come in one call)
    first, last = [s for s, _ in list_checkpoints(run_dir)]
    assert first in (50, 51) and last == 100


def test_ray_learner_calls_take_at_most_max_payloads_per_call(tmp_path, ray_local):
    """--max-payloads-per-call caps the payloads a learner call trains on (diag call_payloads), oldest first; the
    payloads left over go in the next call, so no step is lost or repeated. Three rollout actors and a window of 64
    payloads let several be ready at once, which an uncapped call would take together."""
    flags = ("--steps", "45", "--rollout-workers", "3", "--max-payloads-waiting", "64", "--max-payloads-per-call", "1")
    code, run_dir = run(tmp_path, *flags, serial=False)
    assert code == 0
    steps = assert_steps(run_dir, 45)
    assert {r["call_payloads"] for r in steps} == {1}
    assert json.loads((run_dir / "config.json").read_text())["driver"]["max_payloads_per_call"] == 1


@pytest.mark.parametrize("serial", [True, False])
def test_ppo_epochs_make_their_steps_of_every_payload_and_the_run_stops_on_its_step(tmp_path, serial, request):
    """learner.ppo_epochs=2 with 2-book minibatches: 4 steps a 4-book payload. The driver counts them (in Ray mode
    it stops asking for samples once the payloads sent cover the steps), and the last payload makes only the steps
    left: 41 steps are 11 payloads, no step lost or repeated."""
    from foxhunt_ray.loops import steps_per_payload

    if not serial:
        request.getfixturevalue("ray_local")
    flags = ("--steps", "41", "--set", "learner.minibatch_envs=2", "--set", "learner.ppo_epochs=2")
    args = driver.parse_args([*SMOKE, "--out", str(tmp_path / "plan"), *flags], "test")
    assert steps_per_payload(driver.resolve(args).config) == 4
    code, run_dir = run(tmp_path, *flags, serial=serial)
    assert code == 0
    steps = assert_steps(run_dir, 41)
    assert steps[-1]["env_steps"] == 11 * 4 * 16  # smoke: 4 books x 16 steps a payload
    assert json.loads((run_dir / "config.json").read_text())["run"]["learner"]["ppo_epochs"] == 2


def test_ray_names_a_rollout_actor_that_never_starts(tmp_path, ray_local, monkeypatch, capsys):
    """A rollout actor whose resources Ray cannot give (here each asks a whole CPU, and the 2-CPU instance has one
    beside the learner) stays pending; the run goes on with the other and names it once, instead of saying nothing
    (as the GPU host's twelfth actor once did). Which of the two Ray places first is its choice. The pending actor
    never answers the timings asked at the run's end: a short wait for them ends the test sooner."""
    from foxhunt_ray import loops, remote

    monkeypatch.setattr(remote, "rollout_cpus", lambda n_workers: 1.0)
    monkeypatch.setattr(loops, "STARTING_WARN_S", 0.5)
    monkeypatch.setattr(loops, "WORKER_TIMINGS_WAIT_S", 1.0)
    code, run_dir = run(tmp_path, "--steps", "60", "--rollout-workers", "2", serial=False)
    monkeypatch.undo()
    assert code == 0
    steps = assert_steps(run_dir, 60)
    (placed,) = {r["worker_index"] for r in steps}
    err = capsys.readouterr().err
    assert err.count(f"warning: rollout actor(s) [{1 - placed}] of 2 returned no sample") == 1, err
    assert err.count("warning: rollout actor(s)") == 1, err


def _interval_recording_worker(spans_dir: Path):
    """A RolloutWorker that appends to spans_dir the (start, end) wall times of each of its samples (made inside a
    function, so Ray ships it by value: see _slow_weights_roles)."""
    import os
    import time as clock

    from actors.rollout import RolloutWorker

    class SpanRecordingWorker(RolloutWorker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)

        def sample(self, n_steps=None):
            start = clock.time()
            try:
                clock.sleep(0.05)
                return super().sample(n_steps)
            finally:
                with open(spans_dir / f"{self.worker_index}-{os.getpid()}", "a") as f:
                    f.write(f"{start} {clock.time()}\n")

    return SpanRecordingWorker


def test_ray_max_payloads_ahead_bounds_the_samples_in_flight_or_waiting(tmp_path, ray_local, monkeypatch):
    """--max-payloads-ahead 1: one payload at most is being sampled or waits for the learner, so three rollout
    actors take turns (each asked again only once the learner has trained on the payload before), their samples
    never overlap in time, and every step is still trained on once. Without the bound (a window of 64 payloads) the
    three would sample at the same time."""
    from foxhunt_ray import remote

    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()
    monkeypatch.setattr(remote, "RolloutWorker", _interval_recording_worker(spans_dir))
    flags = ("--steps", "30", "--rollout-workers", "3", "--max-payloads-waiting", "64", "--max-payloads-ahead", "1")
    code, run_dir = run(tmp_path, *flags, serial=False)
    monkeypatch.undo()
    assert code == 0
    steps = assert_steps(run_dir, 30)
    assert {r["worker_index"] for r in steps} == {0, 1, 2}
    spans = sorted(tuple(map(float, x.split())) for f in spans_dir.iterdir() for x in f.read_text().splitlines())
    assert len(spans) >= 6
    overlaps = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert not overlaps, overlaps
    assert json.loads((run_dir / "config.json").read_text())["driver"]["max_payloads_ahead"] == 1


def _slow_weights_roles(gaps_dir: Path, sleep_s: float, sample_s: float):
    """(a RayLearnerWorker whose policy_weights takes sleep_s after its first call, a RolloutWorker whose samples
    take sample_s at least and that appends to gaps_dir the seconds between the end of each of its samples and the
    start of its next). Made inside a function, so Ray ships them by value (the actors' processes cannot import
    this test module)."""
    import os
    import time as clock

    from actors.rollout import RolloutWorker
    from foxhunt_ray.remote import RayLearnerWorker

    # Each defines __init__: the class it derives from goes to the actor by value too (the module attribute it is
    # found by names the subclass while the test runs), and without one, super() there refused the actor.
    class SlowWeightsLearner(RayLearnerWorker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.asked = 0

        def policy_weights(self):
            self.asked += 1
            if self.asked > 1:  # the first: the weights the rollout actors' first sample calls carry
                clock.sleep(sleep_s)
            return super().policy_weights()

    class GapRecordingWorker(RolloutWorker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.last_end = None

        def sample(self, n_steps=None):
            start, last = clock.monotonic(), self.last_end
            if last is not None:
                with open(gaps_dir / f"{self.worker_index}-{os.getpid()}", "a") as f:
                    f.write(f"{start - last}\n")
            try:
                clock.sleep(sample_s)
                return super().sample(n_steps)
            finally:
                self.last_end = clock.monotonic()

    return SlowWeightsLearner, GapRecordingWorker


def test_ray_rollout_actors_never_wait_for_weights_the_learner_has_not_made(tmp_path, ray_local, monkeypatch):
    """The driver sends broadcast weights to the rollout actors only once the learner has made them. A rollout
    actor runs its calls in order, so a set_weights whose argument the learner had not yet made (its
    policy_weights queued behind its update calls) held the actor's next sample until it was; here the learner
    takes 2 s to hand out weights, and no actor waits anywhere near that between two samples. (Samples of 0.1 s
    or more and --max-payloads-waiting 64: the learner's window never fills; an actor idle once no more samples
    are wanted is not asked again.) The weights still arrive: later batches were acted with newer weights."""
    from foxhunt_ray import remote

    gaps_dir = tmp_path / "gaps"
    gaps_dir.mkdir()
    learner_cls, worker_cls = _slow_weights_roles(gaps_dir, sleep_s=2.0, sample_s=0.1)
    monkeypatch.setattr(remote, "RayLearnerWorker", learner_cls)
    monkeypatch.setattr(remote, "RolloutWorker", worker_cls)
    flags = ("--steps", "60", "--broadcast-every", "2", "--max-payloads-waiting", "64")
    code, run_dir = run(tmp_path, *flags, serial=False)
    monkeypatch.undo()
    assert code == 0
    steps = assert_steps(run_dir, 60)
    gaps = [float(x) for f in gaps_dir.iterdir() for x in f.read_text().split()]
    # 60 steps are enough: the two rollout actors sample at most 40 times in one of the learner's 2 s pauses, so
    # the steps after those are sampled once the weights it made have reached them
    assert len(gaps) >= 50 and max(gaps) < 1.0, sorted(gaps)[-5:]
    assert min(r["policy_lag"] - (r["step"] - 1) for r in steps) < 0  # some batch acted with broadcast weights


def test_ray_rollout_actor_killed_mid_run_is_restarted(tmp_path, ray_local):
    killed = []

    def kill_worker_0(step, workers):
        if step >= 30 and not killed:
            ray_local.kill(workers[0], no_restart=False)
            killed.append(step)
            # hold the driver until Ray has restarted the actor (a call on a restarting actor waits for it):
            # otherwise worker 1 alone can finish the run while worker 0's process still starts on 2 busy cores
            ray_local.get(workers[0].get_spaces.remote(), timeout=120)

    code, run_dir = run(tmp_path, "--steps", "100", serial=False, hook=kill_worker_0)
    assert code == 0 and len(killed) == 1 and 30 <= killed[0] <= 35
    steps = assert_steps(run_dir, 100)
    assert any(r["worker_index"] == 0 for r in steps[50:])  # the restarted worker 0 delivers again


def test_ray_learner_actor_killed_mid_run_is_replaced_from_its_checkpoint(tmp_path, ray_local, capsys):
    """The learner actor's process killed (as `ray kill` or an OOM would): the driver replaces it from the newest
    checkpoint, diag.jsonl is cut back to that step and goes on, and the run ends done with every step once."""
    from foxhunt_ray.loops import LEARNER_NAME

    killed = []

    def kill_learner(step, workers):
        if step >= 35 and not killed:
            (name,) = [n for n in ray_local.util.list_named_actors() if n.startswith(LEARNER_NAME)]
            ray_local.kill(ray_local.get_actor(name), no_restart=True)
            killed.append(step)

    # one rollout actor: the fault is the learner actor's (a replacement starts every actor of the run again)
    flags = ("--steps", "70", "--checkpoint-every", "10", "--checkpoint-interval-s", "0", "--rollout-workers", "1")
    code, run_dir = run(tmp_path, *flags, serial=False, hook=kill_learner)
    err = capsys.readouterr().err
    assert code == 0 and len(killed) == 1, err[-3000:]
    assert "the learner actor died" in err and "restart 1 of at most 3" in err
    assert_steps(run_dir, 70)  # 1..70, each once: the steps after the checkpoint were cut and trained again
    s = summary(run_dir)
    assert s["status"] == "done" and s["step"] == 70
    assert [st for st, _ in list_checkpoints(run_dir)][-1] == 70


def test_ray_kill_rule_stops_the_actors(tmp_path, ray_local):
    # one rollout actor: the kill is the learner's step's and the monitor's
    code, run_dir = run(tmp_path, "--steps", "200", "--inject-nan-at", "20", "--rollout-workers", "1", serial=False)
    assert code == 3 and summary(run_dir)["rule"] == "non_finite"
    # an update queued behind the killing one (when the timing left one queued) gets no line: diag.jsonl ends
    # with the kill (the monitor actor's answer to it: the test below)
    recs = lines(run_dir)
    assert recs[-1]["event"] == "kill" and recs[-1]["step"] == 20
    assert_steps(run_dir, 20)


def test_monitor_actor_answers_an_update_queued_behind_a_kill(tmp_path):
    from actors.kill_rules import KillConfig
    from foxhunt_ray.remote import RayMonitor  # the actor's class, built here without a cluster

    def answer(*steps, nan_at=0.0, lost=()):
        diags = [{"step": float(s), "qpa": 0.1, "nan_abort_step": nan_at if s >= nan_at > 0 else 0.0} for s in steps]
        return {"diags": diags, "lost": list(lost), "step": steps[-1] if steps else 0}

    m = RayMonitor(tmp_path, KillConfig())
    first = m.record_update(answer(1, 2))
    assert first["decision"] is None and first["n"] == 2 and first["record"]["step"] == 2
    assert m.record_update(answer(lost=["RayActorError: gone"])) == {
        "lost": ["RayActorError: gone"],
        "step": 0,
        "record": None,
        "n": 0,
        "decision": None,
    }
    killed = m.record_update(answer(3, 4, 5, nan_at=4.0))  # the kill at 4: step 5 of the same answer gets no line
    assert killed["decision"].rule == "non_finite" and killed["n"] == 2 and killed["record"]["step"] == 4
    before = (tmp_path / "diag.jsonl").read_bytes()
    assert m.record_update(answer(6)) == {"lost": [], "step": 6, "after_end": True}
    assert (tmp_path / "diag.jsonl").read_bytes() == before and summary(tmp_path)["step"] == 4
    assert m.timings()["record_s"] > 0


def test_ray_ctrl_c_keeps_a_checkpoint(tmp_path, ray_local):
    def interrupt(step, workers):
        if step >= 20:
            raise KeyboardInterrupt

    code, run_dir = run(tmp_path, "--steps", "200", serial=False, hook=interrupt)
    # the steps already queued on the learner actor run and the monitor actor records them before the stop: at
    # most the payloads of the calls in flight (2 calls of up to 2 payloads) and the one the learner keeps running
    last = summary(run_dir)["step"]
    assert code == 0 and summary(run_dir)["status"] == "stopped" and 20 <= last <= 25
    assert_steps(run_dir, last)  # the summary names the last line of diag.jsonl, with no gap before it
    assert [s for s, _ in list_checkpoints(run_dir)] == [last]  # the checkpoint is the state of the last line


def test_local_entry_point_trains_then_evaluates_held_out(tmp_path, capsys):
    """The main job ends with the held-out table (agent beside the baselines), the next commands and a last line
    that a script can read; --no-eval skips the evaluation."""
    import re

    from foxhunt_ray import local

    code = local.main([*SMOKE, "--serial", "--steps", "5", "--eval-episodes", "2", "--out", str(tmp_path / "a")])
    assert code == 0
    out = capsys.readouterr().out
    run_dir = next((tmp_path / "a").glob("*/*/0"))
    assert "exit 0" in out and len(lines(run_dir)) == 5
    for row in ("agent", "flat", "random", "imbalance", "oracle"):
        assert re.search(rf"^{row} +-?[\d,]+ ", out, re.M), row
    assert re.search(rf"(python|\.venv/bin/python) -m foxhunt_ray\.report {re.escape(str(run_dir))}", out)
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"heldout_pnl_usd=(-?\d+) oracle_pnl_usd=(-?\d+) fraction_of_oracle=(-?[\d.]+|nan)", last)
    assert m, last
    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    assert round(evaluation["policies"]["oracle"]["pnl_usd_mean"]) == int(m[2]) and evaluation["episodes"] == 2
    assert local.main([*SMOKE, "--serial", "--steps", "3", "--no-eval", "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "heldout_pnl_usd" not in out and out.strip().splitlines()[-1].endswith("exit 0")
    assert local.main([*SMOKE, "--eval-episodes", "0", "--out", str(tmp_path / "c")]) == 1


def test_serial_mode_runs_torch_with_rollout_torch_threads_and_restores_it(tmp_path):
    import torch

    seen = []
    before = torch.get_num_threads()
    code, _ = run(tmp_path, "--steps", "2", hook=lambda step, workers: seen.append(torch.get_num_threads()))
    assert code == 0 and seen == [1, 1] and torch.get_num_threads() == before
    code, _ = run(
        tmp_path / "b",
        "--steps",
        "1",
        "--set",
        "rollout.torch_threads=2",
        hook=lambda s, w: seen.append(torch.get_num_threads()),
    )
    assert code == 0 and seen[-1] == 2 and torch.get_num_threads() == before


def test_progress_bar_shows_the_share_done_and_the_time_left(tmp_path):
    import io

    from foxhunt_ray.loops import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    plan = type("P", (), {})()
    plan.quiet, plan.resume_step = False, 0
    plan.driver = driver.DriverConfig(steps=100)
    log = io.StringIO()
    p = Progress(plan, every_s=0.0, stream=log)
    p.start -= 10.0  # 10 s in
    p.show({"step": 25, "env_steps": 1000, "qpa_ema": 0.5, "pnl_cum_usd": -12.0})
    line = log.getvalue()
    assert line.endswith("\n") and "[#####               ]  25% update 25/100" in line
    assert "ETA 30s" in line and "pnl $-12" in line and "qpa_ema +0.500" in line
    tty = Tty()
    p = Progress(plan, every_s=0.0, tty_every_s=0.0, stream=tty)
    p.show({"step": 50, "env_steps": 10, "qpa_ema": 0.1, "pnl_cum_usd": 0.0})
    p.show({"step": 60, "env_steps": 20, "qpa_ema": 0.1, "pnl_cum_usd": 0.0})
    assert tty.getvalue().count("\r") == 2 and "\n" not in tty.getvalue()  # redrawn in place
    p.end_line()
    assert tty.getvalue().endswith("\n")
    limited = type("P", (), {})()
    limited.quiet, limited.resume_step = False, 0
    limited.driver = driver.DriverConfig(steps=10**6, time_limit_s=40.0)
    log = io.StringIO()
    p = Progress(limited, every_s=0.0, stream=log)
    p.start -= 10.0
    p.show({"step": 5, "env_steps": 0, "qpa_ema": 0.0, "pnl_cum_usd": 0.0})
    assert " 25% of 40 s  update 5  env steps" in log.getvalue() and "ETA 30s" in log.getvalue()  # the time limit


def test_progress_eta_rounds_whole_seconds_before_splitting_minutes():
    from foxhunt_ray.loops import Progress

    assert Progress._eta(0.5, 119.4) == "1m59s"  # was "2m59s": the minutes rounded up, the seconds not
    assert Progress._eta(0.5, 59.6) == "1m00s" and Progress._eta(0.5, 59.4) == "59s"
    assert Progress._eta(0.25, 60.0) == "3m00s" and Progress._eta(0.0, 5.0) == "?"


def test_the_learning_rate_decays_over_the_run(tmp_path):
    """--set learner.lr_decay_to=0: each payload's steps take lr * (1 - progress), progress being the steps done
    before them over --steps (DriverConfig.progress, the time budget's share when that is larger)."""
    code, run_dir = run(tmp_path, "--steps", "12", "--set", "learner.lr_decay_to=0")
    assert code == 0
    recs = [r for r in lines(run_dir) if "event" not in r]
    scales = [r["lr_scale"] for r in recs]
    assert [r["step"] for r in recs] == list(range(1, 13)) and scales[0] == 1.0
    assert all(b <= a for a, b in itertools.pairwise(scales)), scales
    for r in recs:  # a payload's steps share the scale set before its first
        assert 1 - (r["step"] - 1) / 12 <= r["lr_scale"] + 1e-9, (r["step"], r["lr_scale"])
    assert scales[-1] < 0.5
    drv = driver.DriverConfig(steps=100, time_limit_s=10.0)
    started = time.monotonic()
    assert drv.progress(20, started) == pytest.approx(0.2, abs=0.01)  # the steps' share, the time's ~0
    assert drv.progress(20, started - 5.0) == pytest.approx(0.5, abs=0.01)  # the time's share, larger
    assert drv.progress(500, started) == 1.0 and driver.DriverConfig(steps=10).progress(5, started - 1e6) == 0.5


def test_an_interrupt_inside_a_learner_and_monitor_pair_is_handled_after_both_are_sent():
    """foxhunt_ray.loops.interrupts_after: a SIGTERM (or Ctrl-C) that arrives between sending the learner's call and
    the monitor's is held until both are sent, then meets the handler it would have (the driver's:
    KeyboardInterrupt)."""
    import os
    import signal

    from foxhunt_ray.driver import _sigterm_as_interrupt
    from foxhunt_ray.loops import interrupts_after

    previous = _sigterm_as_interrupt()
    sent = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with interrupts_after():
                sent.append("learner")
                os.kill(os.getpid(), signal.SIGTERM)  # delivered here, between the two sends
                time.sleep(0.05)
                sent.append("monitor")
        assert sent == ["learner", "monitor"]
        with pytest.raises(KeyboardInterrupt):  # outside the block the driver's handler acts at once again
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_cartpole_trains_through_ray_actors(tmp_path, ray_local):
    """Another Gymnasium env (tests/test_env_id.py) through the rollout, learner and monitor actors: here, where this
    file's Ray instance already runs."""
    from actors.episode_stats import EPISODE_RETURN_MEAN
    from tests.test_env_id import run_cartpole

    code, _, lines = run_cartpole(tmp_path, "--steps", "40", serial=False)
    assert code == 0 and [r["step"] for r in lines] == list(range(1, 41))
    assert {r["worker_index"] for r in lines} == {0, 1}
    assert all("pnl_cum_usd" not in r for r in lines) and lines[-1]["episodes"] > 0
    assert EPISODE_RETURN_MEAN in lines[-1]
