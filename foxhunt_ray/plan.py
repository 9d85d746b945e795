"""What a run is, resolved before it starts: the Plan (foxhunt_ray.driver.resolve builds it) and its
DriverConfig (how the run is driven). The driver resolves a Plan and hands it to the loops that run it
(foxhunt_ray.loops); both import it from here, so the loops never import the driver.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from actors.config import MAX_ROLLOUT_WORKERS, ROLLOUT_WORKERS_WHY
from actors.envs import EnvSpaces
from actors.wire import MAX_COUNTER
from foxhunt_ray.config import RunConfig
from foxhunt_ray.flags import Flag
from learner.config import NO_FAULTS, FaultInjection
from lobsim_env.validation import Int, field_errors


@dataclass(kw_only=True, frozen=True)
class DriverConfig:
    """How a run is driven (not what is trained): recorded beside the RunConfig in config.json. A field is a
    setting: its Flag makes it a flag and a line of --help (foxhunt_ray.flags), and it is a `--set driver.FIELD=VALUE`
    key and a key of a --config file's [driver] table (foxhunt_ray.cli); an entry point's defaults of it are in
    foxhunt_ray.cli.ENTRY_DEFAULTS."""

    steps: Annotated[int, Int(ge=1), Flag("learner updates")] = 200
    """Learner updates: the run ends after update `steps` (a resumed run continues to it)."""
    rollout_workers: Annotated[
        int, Int(ge=1, le=MAX_ROLLOUT_WORKERS, why=ROLLOUT_WORKERS_WHY), Flag("rollout workers")
    ] = 2
    """Rollout workers (Ray actors, or plain objects in serial mode); at most actors.config.MAX_ROLLOUT_WORKERS."""
    fold: Annotated[
        int,
        Int(ge=0, le=MAX_COUNTER, why="every rollout payload carries it: actors.wire.MAX_COUNTER"),
        Flag("walk-forward fold (default {default}; with --data: K trains on the cache's dates before the K-th and "
             "evaluates on it, default the last date)", resume=False),
    ] = 0
    """Walk-forward fold; the run folder is <out>/<code_sha>/<name>/<fold>/. At most 2**53: a payload of a larger
    fold is refused (and one beyond 2**64 cannot be packed: a traceback, a run folder left behind)."""
    name: Annotated[str, Flag(
        "the run's name, its folder below <code_sha> (default: <preset>-<env>-s<seed>-<UTC start time>)",
        resume=False, show_default=False,
    )] = ""
    """The run's name, its folder below <code_sha> (--name, else preset-env-seed-start time:
    foxhunt_ray.run_folder.run_name). Empty in config.json of runs from before names (<out>/<code_sha>/<fold>/)."""
    storage: Annotated[str, Flag(
        "also keep the run folder at ROOT/<code_sha>/<name>/<fold>/: a path or a URI (file://, s3:// with s3fs, "
        "...), copied at the start, after each checkpoint and at the end; --resume and evaluate read it back",
        metavar="ROOT", resume=False, show_default=False,
    )] = ""
    """Where the run folder is copied besides the driver's disk (--storage: a path or a URI; foxhunt_ray.storage),
    '' for none."""
    learner_resources: Annotated[dict[str, float], Flag(
        "Ray mode: custom resources for the learner actor, e.g. '{\"learner_node\": 1}' to place it on the node "
        "started with `ray start --resources '{\"learner_node\": 1}'`",
        metavar="JSON", show_default=False, example='{"learner_node": 1}',
    )] = field(default_factory=dict)
    """Ray mode: custom resources the learner actor asks for, e.g. {"learner_node": 1} to place it on the node
    started with `ray start --resources '{"learner_node": 1}'`."""
    broadcast_every: Annotated[int, Int(ge=1), Flag("K: updates between weight broadcasts")] = 4
    """K: the learner's policy weights go to the rollout workers every K updates."""
    checkpoint_every: Annotated[int, Int(ge=1), Flag("M: updates between checkpoints")] = 100
    """M: the learner worker checkpoints every M updates (at the end of the learner call whose steps pass a
    multiple of M; and at the end, on a kill and on Ctrl-C)..."""
    checkpoint_interval_s: Annotated[
        float, Flag("...and seconds at least (0: none; default {default})", metavar="S")
    ] = 60.0
    """...but no sooner than this many seconds after its previous checkpoint (0: every M updates). A checkpoint
    holds the replay (tens of MB) and waits for the GPU: a GPU learner makes hundreds of updates a second."""
    keep_checkpoints: Annotated[int, Int(ge=0), Flag(
        "checkpoints the run folder keeps, the newest (0: all, for a pick on a validation day; default {default})",
        metavar="N",
    )] = 2
    """Checkpoints the run folder keeps, the newest (0: every one, what the walk-forward protocol picks a fold's
    checkpoint among on its validation day: foxhunt_ray.walkforward). At least two for a resume (actors.checkpoints)."""
    max_payloads_waiting: Annotated[
        int, Int(ge=1), Flag("rollout payloads waiting for the learner, at most")
    ] = 4
    """Ray mode: rollout payloads sampled but not yet trained on, at most; a worker whose next sample would
    exceed it waits for the learner. Bounds the policy lag (docs/system.md, "Policy lag")."""
    max_payloads_per_call: Annotated[int, Int(ge=0), Flag(
        "payloads a learner call trains on, at most (0: all that are ready; default {default})", metavar="N"
    )] = 0
    """Ray mode: payloads one learner call trains on, at most (0: every payload ready when the call is sent). The
    weights the rollout actors get next are asked of the learner behind its queued calls, so a call of many
    payloads holds them back for all its steps (docs/system.md, "Policy lag")."""
    max_payloads_ahead: Annotated[int, Int(ge=0), Flag(
        "payloads being sampled or waiting for the learner, at most (0: no bound but --max-payloads-waiting; "
        "default {default})",
        metavar="N",
    )] = 0
    """Ray mode: payloads being sampled or waiting for the learner, at most (0: no bound but max_payloads_waiting).
    A rollout actor is asked for its next sample only while there is room, one actor per payload the learner
    finishes, so the actors sample on different weights rather than all on one (docs/system.md, "Policy lag")."""
    max_worker_restarts: Annotated[
        int, Int(ge=0), Flag("Ray mode: restarts of a rollout actor that died", metavar="N")
    ] = 3
    """Ray restarts of a rollout actor that died (its in-flight sample is retried on the new one)."""
    sample_timeout_s: Annotated[float, Flag(
        "Ray mode: restart a rollout actor whose sample has not come back in S seconds (0: wait for ever; "
        "default {default})",
        metavar="S",
    )] = 300.0
    """Ray mode: a rollout actor whose sample has not come back this many seconds after it was asked (hung: alive
    but silent) is killed and restarted by Ray; the sample is retried on the new actor and the restart counts
    against max_worker_restarts. 0: wait for ever. A healthy sample takes seconds at most, the first one with
    the actor's start."""
    learner_timeout_s: Annotated[float, Flag(
        "Ray mode: replace a learner actor that has not answered a call in S seconds (0: wait for ever; "
        "default {default})",
        metavar="S",
    )] = 600.0
    """Ray mode: a learner call not answered this many seconds after it was sent (the learner actor alive but
    stuck) has the learner actor killed; the driver replaces it as one that died (max_learner_restarts). 1800 s
    for a learner's first answer (it may build the CUDA extension and capture its graphs first). 0: wait for ever."""
    monitor_timeout_s: Annotated[float, Flag(
        "Ray mode: end the run (exit 1, its data kept by the driver) when the monitor actor has not answered in "
        "S seconds (0: wait for ever; default {default})",
        metavar="S",
    )] = 600.0
    """Ray mode: the monitor actor's answer not back this many seconds after the monitor could start on it (the
    learner's answer it records is ready and its previous call is answered; a call of the driver's own, the
    stop's checkpoint or summary.json, after it was sent) ends the run: the monitor actor (alive but silent:
    stopped, hung) is killed, and the driver records what the learner still holds, keeps a final checkpoint and
    writes summary.json 'error' itself (exit 1; docs/faults.md). The learner is never blamed for it: its own
    timeout counts until its answer is ready. 0: wait for ever."""
    max_learner_restarts: Annotated[
        int, Int(ge=0), Flag("Ray mode: replacements of a learner actor that died, within the run", metavar="N")
    ] = 3
    """Ray mode: times a learner actor that died (killed, out of memory) is replaced within the run, resuming from
    its newest checkpoint: diag.jsonl is cut back to that step and goes on from it, no gap and no duplicate."""
    time_limit_s: Annotated[float, Flag(
        "stop starting updates after S seconds of training (0: none; default {default})", metavar="S"
    )] = 0.0
    """Wall-clock budget of the training loop in seconds (0: none): no update is started after it, the run
    ends 'done' with a checkpoint at the step it reached, like a run of that many steps."""

    def errors(self) -> list[str]:
        errs = list(field_errors(self, "driver").values())
        res = self.learner_resources
        if not isinstance(res, dict) or not all(
            isinstance(k, str) and k and k not in ("CPU", "GPU") and isinstance(v, int | float)
            and not isinstance(v, bool) and 0 < v < math.inf
            for k, v in res.items()
        ):  # fmt: skip
            errs.append(
                f"driver.learner_resources={res!r} must be a JSON object of custom resource names and amounts > 0, "
                'e.g. {"learner_node": 1} (the CPU and GPU the learner takes are chosen by the driver)'
            )
        if self.keep_checkpoints == 1:
            errs.append(
                "driver.keep_checkpoints=1 must be 0 (all) or >= 2: a resume may need the one before the newest"
            )
        timeouts = ("sample_timeout_s", "learner_timeout_s", "monitor_timeout_s")
        for name in ("time_limit_s", "checkpoint_interval_s", *timeouts):
            t = getattr(self, name)
            if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t < float("inf"):
                errs.append(f"driver.{name}={t!r} must be a number of seconds >= 0 (0: no limit)")
        return errs

    def out_of_time(self, start: float) -> bool:
        """Whether the loop that started at time.monotonic() == start has used its time_limit_s."""
        return self.time_limit_s > 0 and time.monotonic() - start >= self.time_limit_s

    def progress(self, step: int, start: float) -> float:
        """The run's progress in [0, 1] at learner step `step`, the loop having started at time.monotonic() ==
        start: the larger of the steps done and the time budget spent (Learner.set_progress: the learning-rate
        decay). A resumed run (by hand, or after its learner actor was replaced) counts the time budget it is given
        from its own start."""
        done = step / self.steps
        if self.time_limit_s > 0:
            done = max(done, (time.monotonic() - start) / self.time_limit_s)
        return min(max(done, 0.0), 1.0)


@dataclass(kw_only=True)
class Plan:
    """Everything resolved before a run starts."""

    config: RunConfig
    driver: DriverConfig
    spaces: EnvSpaces
    run_dir: Path
    """OUT/<code_sha>/<name>/<fold>/ on the driver's node: every file of the run is written there."""
    out: Path | None
    """The runs root whose `latest` points at this run when it starts (None: leave any pointer alone)."""
    code_sha: str
    baseline: str | None
    resume_step: int = 0
    checkpoint: Path | None = None
    serial: bool = False
    quiet: bool = False
    sizing_reason: str = ""
    """Why the run has its sizing (the header says it): the flag, the entry point's default, or the device."""
    fresh: bool = True
    """A new run: config.json is written (a resume keeps the run's own)."""
    monitor_resume_at: int | None = None
    """The step diag.jsonl is cut back to before the run appends (None: a new folder, nothing to cut)."""
    notes: tuple[str, ...] = ()
    """What the user is told before the run starts: a checkpoint passed over, a start from step 0, a config change."""
    config_change: tuple[str, ...] = ()
    """The fields of config.json changed since the run wrote it, accepted by --allow-config-change."""
    faults: FaultInjection = NO_FAULTS
    """Test-only faults the learner makes (--inject-nan-at, --flip-distill-sign), recorded in config.json apart
    from the learner config; a resume keeps the run's own."""
