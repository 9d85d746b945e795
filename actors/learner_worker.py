"""The learner role: wraps Learner with the receive path, weight publishing, episode totals and checkpoints.

A plain class (no Ray; foxhunt_ray.remote wraps it). `train(payloads)` decodes each rollout payload with a counting
PayloadDecoder (a bad payload, or one the Learner refuses, is dropped and counted, and the learner keeps going; so is
one acted with a policy_version above the learner's step, or listing more ended episodes than its T x B steps),
runs the Learner's steps on it (`learner.minibatch_envs`: one step per minibatch of envs) and returns the diag
dicts the monitor records: the Learner's keys plus the episode totals (EpisodeStats.diag: env_steps, episodes,
return_cum, episode_return_mean and, for the market, pnl_cum_usd), worker_index, call_payloads (the payloads in the
`train` call the step's payload came in: how the driver batches them) and bad_payloads. Policy lag comes from the
Learner (step - 1 - the batch's policy_version).

On a GPU the receive path never waits for the device: a payload's learner columns are copied into pinned host
buffers (two sets, used in turn), validated there, sent to the device in one asynchronous copy, and its steps are
queued, then a copy of their diag values into pinned memory and an event. With `wait=False` the last payload's
steps are left running when `train` returns (their diags come with the next call, or `drain()`), so the GPU works
on them while the caller fetches and stages the next payloads: the GPU, not the host, sets the pace
(BENCHMARKS.md, "The system on one GPU host"). The call waits on the event of the last payload it returns, never
on a read of device values: such a read is a copy queued behind every step, the newest payload's too, and would
leave the GPU idle while the host stages the next one. Policy weights are copied to pinned memory after each
payload's steps, asynchronously; `policy_weights()` hands out the newest copy that has landed.

A checkpoint is bytes, never a file written here: `checkpoint()` returns one, and the periodic ones wait in
`take_checkpoints()` for the caller, who writes them into the run folder with `write_checkpoint` (the serial loop
in its process; in Ray mode the monitor actor on the driver's node, so a learner on another node never needs the
run folder's disk: foxhunt_ray.remote). What a checkpoint holds and how it is read: actors.checkpoints.
`write_checkpoint` writes run_dir/checkpoints/ckpt_<step>.pt to a
temporary file, fsyncs and renames it, so a crash never leaves half a checkpoint under the final name, and keeps
the newest KEEP_CHECKPOINTS. A checkpoint holds the Learner's state (replay included: a resume continues
bit-exactly on the learner side), the episode totals and the bad payload count, so a resumed run's diag continues
its cumulative fields. A checkpoint first finishes every queued step; their diags are returned by the next `train`
or `drain`. `load` takes a file or the bytes of one (a learner on another node gets them from the driver).
"""

from __future__ import annotations

import dataclasses
import io
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from actors.checkpoints import RUN_CHECKPOINT_FORMAT, Checkpoint, CheckpointError, describe, read_checkpoint
from actors.episode_stats import EpisodeStats
from actors.wire import DEFAULT_LIMITS, PayloadDecoder, WireLimits
from learner.config import NO_FAULTS, FaultInjection, LearnerConfig
from learner.learner import Learner
from learner.minibatch import Pending
from learner.replay import BATCH_DTYPES, rollout_from_batch

TIMING_KEYS: tuple[str, ...] = (
    "decode_s",
    "stage_s",
    "launch_s",
    "sync_s",
    "h2d_gpu_s",
    "payload_gpu_s",
    "update_gpu_s",
    "weights_s",
    "checkpoint_s",
    "payloads",
    "updates",
)
"""LearnerWorker.timings(): decode_s (wire checks), stage_s (copy to the staging buffers and validation), launch_s
(queueing the steps: host time), sync_s (waiting for the device to read diags), weights_s (policy weight copies),
checkpoint_s, and, by CUDA events on a GPU learner: h2d_gpu_s (the rollout's copy to the device), payload_gpu_s
(from a payload's first step to its last on the learner's stream: the steps' work and any wait for the host's
launches in between) and update_gpu_s (the captured updates' replays alone: the learner's GPU work; on a CPU
learner, the steps' time); and the payloads and updates done."""


@dataclass(kw_only=True)
class _Payload:
    """A payload whose steps are queued: their diag values and the device time are read by `_collect`."""

    steps: list[Pending]
    totals: dict
    """EpisodeStats.diag() with this payload counted, plus worker_index and bad_payloads."""
    events: tuple | None = None
    """CUDA events (copy start, steps start, steps end) on a GPU learner."""
    cpu_update_s: float = 0.0
    weights: dict | None = None
    """The policy's weights after this payload's steps, being copied to pinned memory (a GPU learner)."""
    diag_values: torch.Tensor | None = None
    """The steps' diag values, being copied to pinned memory (a GPU learner): landed once events[2] has."""


@dataclass(kw_only=True)
class _Staging:
    """A pinned host buffer per learner column for one rollout shape, and the event after its last device copy."""

    columns: dict[str, torch.Tensor]
    arrays: dict[str, np.ndarray]
    """numpy views of `columns`, what the payload's arrays are copied into."""
    copied: torch.cuda.Event | None = None


class LearnerWorker:
    """Learner + PayloadDecoder + EpisodeStats + checkpoints; methods: train, drain, policy_weights, checkpoint,
    take_checkpoints, load, timings."""

    def __init__(
        self,
        cfg: LearnerConfig,
        *,
        obs_dim: int,
        n_actions: int,
        seed: int = 0,
        device: str | None = None,
        checkpoint_every: int | None = None,
        checkpoint_interval_s: float = 0.0,
        limits: WireLimits = DEFAULT_LIMITS,
        has_pnl: bool = True,
        faults: FaultInjection = NO_FAULTS,
        obs_mean: Sequence[float] | None = None,
        obs_std: Sequence[float] | None = None,
    ):
        """checkpoint_every: M, take a checkpoint once the step passes a multiple of M (None: only when asked),
        and no sooner than checkpoint_interval_s seconds after the last one; it waits in take_checkpoints().
        has_pnl: the env reports pnl_usd (the market; EpisodeStats.has_pnl). faults: test-only faults the Learner
        makes on purpose (learner.config.FaultInjection). obs_mean, obs_std: the probed observation statistics
        (actors.envs.EnvSpaces) the encoder standardises by when cfg.obs_norm is on."""
        errs = []
        m = checkpoint_every
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            errs.append(f"checkpoint_every={m!r} must be None or an int >= 1")
        s = checkpoint_interval_s
        if isinstance(s, bool) or not isinstance(s, int | float) or not 0 <= s < float("inf"):
            errs.append(f"checkpoint_interval_s={s!r} must be a number of seconds >= 0")
        if errs:
            raise ValueError("cannot build LearnerWorker:\n  " + "\n  ".join(errs))
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.learner = Learner(
            cfg,
            obs_dim=int(obs_dim),
            n_actions=int(n_actions),
            device=device,
            seed=seed,
            faults=faults,
            obs_mean=obs_mean,
            obs_std=obs_std,
        )
        self.on_cuda = self.learner.device.type == "cuda"
        if self.learner.graph is not None:
            self.learner.graph.timed = True
        self.decoder = PayloadDecoder(limits=limits)
        self.stats = EpisodeStats(has_pnl=has_pnl)
        self._outbox: list[Checkpoint] = []  # periodic checkpoints the caller has not taken yet
        self.checkpoint_every = checkpoint_every
        self.checkpoint_interval_s = float(checkpoint_interval_s)
        self._last_checkpoint = (self.learner.step, time.monotonic())
        self._queued: list[_Payload] = []  # payloads whose steps are queued, oldest first
        self._done: list[dict] = []  # diags read but not yet returned (a checkpoint drained them)
        self._staging: dict[tuple, list[_Staging]] = {}
        self._turn = 0
        self._pool: ThreadPoolExecutor | None = None  # stages the next payload while this one's steps queue
        self._seconds = dict.fromkeys(TIMING_KEYS, 0.0)
        self._weights = self.learner.policy_weights()

    @property
    def step(self) -> int:
        """The learner's step, counting queued steps."""
        return self.learner.step

    # ------------------------------------------------------------------ training
    def train(
        self, payloads: list, *, wait: bool = True, stop_at: int | None = None, progress: float | None = None
    ) -> list[dict]:
        """Trains on each payload in turn and returns the diags of the steps finished since the last call: all
        of them with wait=True; with wait=False all but the last payload's (left running on the device: the
        next call or `drain` returns them). stop_at: no step past this learner step (the run's end). progress:
        the run's progress in [0, 1] for these steps (Learner.set_progress: the learning-rate decay)."""
        if progress is not None:
            self.learner.set_progress(progress)
        for prepared in self._prepared(payloads):
            if stop_at is not None and self.learner.step >= stop_at:
                break
            if prepared is not None:
                self._launch(prepared, None if stop_at is None else stop_at - self.learner.step, len(payloads))
        out = self._collect(keep_last=not wait)
        if self._checkpoint_due():
            out += self._collect(keep_last=False)
            self._outbox.append(self.checkpoint())
        return out

    def starved(self) -> str | None:
        """Why the run cannot go on, when every recent payload was bad or refused (PayloadDecoder.starved: 64 in a
        row, or 120 s of them without a good one); None while good payloads arrive. The loops end the run on it."""
        return self.decoder.starved()

    def drain(self) -> list[dict]:
        """The diags of every queued step (waits for the device)."""
        return self._collect(keep_last=False)

    def update(self, payload) -> list[dict]:
        """`train([payload])`: every step of one payload, finished."""
        return self.train([payload])

    def _prepared(self, payloads: list):
        """_prepare of each payload in turn; on a GPU learner the next one is prepared in a second thread while
        this one's steps are queued (numpy's copies and reductions and torch's CPU ops release the GIL)."""
        if not self.on_cuda or len(payloads) < 2:
            for p in payloads:
                yield self._prepare(p)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="learner-stage")
        pending = self._pool.submit(self._prepare, payloads[0])
        try:
            for nxt in payloads[1:]:
                got = pending.result()
                # its staging set is the one the payload before `got` used, whose copy `_launch` has queued
                pending = self._pool.submit(self._prepare, nxt)
                yield got
            got, pending = pending.result(), None
            yield got
        finally:
            if pending is not None:  # the caller stopped early: let the staging finish before anything reuses it
                pending.result()

    def _prepare(self, payload) -> tuple | None:
        """(rollout on the host, meta, staging set) of a payload: decoded, copied into a staging set and
        validated; None for a bad payload or one the learner refuses (counted)."""
        sec = self._seconds
        t0 = time.perf_counter()
        got = self.decoder.decode(payload)
        t1 = time.perf_counter()
        sec["decode_s"] += t1 - t0
        if got is None:
            return None
        batch, meta = got
        if (why := self._refusal(batch, meta)) is not None:
            self.decoder.count_bad(why, what="rollout payload refused by the learner")
            sec["stage_s"] += time.perf_counter() - t1
            return None
        staged, st = self._stage(batch)
        try:  # finite_checked: decode checked the float columns
            host = rollout_from_batch(
                staged, obs_dim=self.learner.obs_dim, n_actions=self.learner.n_actions, finite_checked=True
            )
        except ValueError as err:  # decoded, but not a rollout this learner can train on
            self.decoder.count_bad(str(err), what="rollout payload refused by the learner")
            return None
        finally:
            sec["stage_s"] += time.perf_counter() - t1
        return host, meta, st

    def _refusal(self, batch: dict, meta: dict) -> str | None:
        """Why a decoded payload is no batch of this learner's run, in what only the learner knows or the wire's
        shapes allow (the rest: rollout_from_batch); None when it is one. A policy_version above this learner's
        step (weights it never made: a rollout worker of another run); more ended episodes than the batch has
        steps of books (one per book a step at most)."""
        version, step = batch["policy_version"], self.learner.step
        if version > step:
            return (
                f"policy_version={version} must be in 0..{step}, this learner's step: the batch was acted with weights "
                "this learner never made (a rollout worker of another run or learner); restart the rollout workers "
                "with this learner's weights (policy_weights())"
            )
        t_len, b = batch["rewards"].shape
        ended = int(meta["episode_env"].size)
        if ended > t_len * b:
            return (
                f"episode_env lists {ended} ended episodes, over the {t_len * b} a batch of T={t_len} steps of B={b} "
                "books can end (at most one a book a step): corrupted, or not made by actors.rollout.RolloutWorker"
            )
        return None

    def _launch(self, prepared: tuple, limit: int | None, call_payloads: int) -> None:
        """Queues a prepared payload's steps (no sync) and what its diags, timings and weights need; call_payloads:
        the payloads in the train() call it came in (diag call_payloads)."""
        host, meta, st = prepared
        t0 = time.perf_counter()
        events = tuple(torch.cuda.Event(enable_timing=True) for _ in range(3)) if self.on_cuda else None
        try:
            steps = self.learner.start_updates(
                host,
                limit=limit,
                before_copy=events[0].record if events else None,
                after_copy=events[1].record if events else None,
            )
        except ValueError as err:  # e.g. a rollout of B envs that minibatch_envs does not divide
            self.decoder.count_bad(str(err), what="rollout payload refused by the learner")
            return
        self.decoder.good()
        self.stats.add(meta)  # a step's diag counts the env steps of the payload it trained on
        totals = {
            **self.stats.diag(),
            "worker_index": int(meta["worker_index"]),
            "call_payloads": call_payloads,
            **self.decoder.diag(),
        }
        record = _Payload(steps=steps, totals=totals)
        if events:
            record.weights = self._policy_state_async()  # queued before events[2]: landed once that has
            if steps:
                record.diag_values = self.learner.diag_values_to_host(steps)  # likewise
            events[2].record()
            st.copied = events[1]
            record.events = events
        t1 = time.perf_counter()
        if events:
            self._seconds["launch_s"] += t1 - t0
        else:
            record.cpu_update_s = t1 - t0
        self._seconds["payloads"] += 1
        self._queued.append(record)

    def _collect(self, *, keep_last: bool) -> list[dict]:
        """Reads the diags of the queued payloads (all, or all but the newest), in order."""
        ready = self._queued[:-1] if keep_last else self._queued
        self._queued = self._queued[len(ready) :]
        out, self._done = self._done, []
        if not ready:
            return out
        sec = self._seconds
        t0 = time.perf_counter()
        host = None
        if all(r.events is not None for r in ready):
            # wait for these payloads' own work only (their last event), not for the steps queued after them
            # (a read of device values would be a copy queued behind every step, the newest payload's too: the
            # GPU would then idle while the host stages the next payload)
            ready[-1].events[2].synchronize()
            copies = [r.diag_values for r in ready if r.steps]
            host = torch.cat(copies) if copies else None
        diags = self.learner.finish_updates([p for r in ready for p in r.steps], host_values=host)
        sec["sync_s"] += time.perf_counter() - t0
        at = 0
        for r in ready:
            for d in diags[at : at + len(r.steps)]:
                d.update(r.totals)
                out.append(d)
            at += len(r.steps)
            sec["updates"] += len(r.steps)
            if r.events:
                sec["h2d_gpu_s"] += r.events[0].elapsed_time(r.events[1]) / 1e3
                sec["payload_gpu_s"] += r.events[1].elapsed_time(r.events[2]) / 1e3
                sec["update_gpu_s"] += (
                    sum(p.graph_events[0].elapsed_time(p.graph_events[1]) for p in r.steps if p.graph_events) / 1e3
                )
            else:
                sec["update_gpu_s"] += r.cpu_update_s
            if r.weights is not None:
                self._weights = r.weights  # its copy was queued before the steps just waited for: it has landed
        return out

    def _stage(self, batch: dict) -> tuple[dict, _Staging]:
        """The learner columns copied into this learner's staging buffers (pinned on a GPU learner, two sets
        used in turn, a set reused only once the device has read it), plus policy_version; and the set."""
        shape = batch["obs"].shape
        sets = self._staging.get(shape)
        if sets is None:
            t_len, b = shape[0] - 1, shape[1]
            sets = []
            for _ in range(2 if self.on_cuda else 1):
                cols = {
                    k: torch.empty(shape if k == "obs" else (t_len, b), dtype=dt, pin_memory=self.on_cuda)
                    for k, dt in BATCH_DTYPES.items()
                }
                sets.append(_Staging(columns=cols, arrays={k: v.numpy() for k, v in cols.items()}))
            self._staging = {shape: sets}  # one rollout shape per run: older shapes' buffers are let go
        self._turn = (self._turn + 1) % len(sets)
        st = sets[self._turn]
        if st.copied is not None:
            st.copied.synchronize()  # the device copy that read this set (a payload ago) is done
        for k, a in st.arrays.items():
            np.copyto(a, batch[k])
        return {**st.columns, "policy_version": batch["policy_version"]}, st

    # ------------------------------------------------------------------ weights
    def policy_weights(self) -> dict:
        """What a rollout worker loads: Learner.policy_weights() as of the newest copy that has landed (on a GPU
        learner, the weights after some payload's steps that the device has finished: no sync)."""
        t0 = time.perf_counter()
        if not self.on_cuda:  # the steps are done when queued: the weights are there now
            out = self.learner.policy_weights()
        else:
            for r in reversed(self._queued):
                if r.weights is not None and r.events[2].query():
                    self._weights = r.weights
                    break
            w = self._weights
            out = {**w, "state": {k: v.clone() for k, v in w["state"].items()}}
        self._seconds["weights_s"] += time.perf_counter() - t0
        return out

    def _policy_state_async(self) -> dict:
        """Learner.policy_weights() copied into fresh pinned buffers after the steps queued so far (no sync)."""
        t0 = time.perf_counter()
        net = self.learner.net
        state = {}
        for k, v in net.state_dict().items():
            if k.startswith(("encoder.", "pi.")):
                dst = torch.empty(v.shape, dtype=v.dtype, pin_memory=True)
                dst.copy_(v.detach(), non_blocking=True)
                state[k] = dst
        w = {**self._weights, "version": self.learner.step, "state": state}
        self._seconds["weights_s"] += time.perf_counter() - t0
        return w

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_due(self) -> bool:
        m = self.checkpoint_every
        last_step, last_time = self._last_checkpoint
        return bool(
            m and self.learner.step // m > last_step // m and time.monotonic() - last_time >= self.checkpoint_interval_s
        )

    def checkpoint(self) -> Checkpoint:
        """Finishes every queued step, then returns the checkpoint of this step (write it with
        `write_checkpoint`)."""
        t0 = time.perf_counter()
        self._done += self._collect(keep_last=False)
        state = {
            "format": RUN_CHECKPOINT_FORMAT,
            "step": self.learner.step,
            "learner": self.learner.state_dict(),
            "stats": dataclasses.asdict(self.stats),
            "bad_payloads": self.decoder.bad_payloads,
        }
        buf = io.BytesIO()
        torch.save(state, buf)
        self._last_checkpoint = (self.learner.step, time.monotonic())
        self._seconds["checkpoint_s"] += time.perf_counter() - t0
        return Checkpoint(step=self.learner.step, data=buf.getvalue())

    def take_checkpoints(self) -> list[Checkpoint]:
        """The periodic checkpoints taken since the last call, oldest first (the caller writes them)."""
        out, self._outbox = self._outbox, []
        return out

    def load(self, source: str | Path | bytes) -> int:
        """Restores a checkpoint (a file, or its bytes; actors.checkpoints reads it); returns its learner step.
        Raises CheckpointError naming it when it cannot be read or does not load into this learner."""
        state = read_checkpoint(source)
        self._collect(keep_last=False)
        self._done = []
        try:
            self.learner.load_state_dict(state["learner"])
            stats = EpisodeStats(**{**state["stats"], "has_pnl": self.stats.has_pnl})
            bad_payloads = int(state["bad_payloads"])
        except Exception as err:  # a missing key, a tensor of another shape: name the file, not a traceback
            raise CheckpointError(
                f"{describe(source)} does not load into this learner ({type(err).__name__}: {str(err)[:200]}); "
                "resume from another checkpoint (--resume-checkpoint STEP|PATH)"
            ) from None
        self.stats, self.decoder.bad_payloads = stats, bad_payloads
        self._last_checkpoint = (self.learner.step, time.monotonic())
        self._weights = self.learner.policy_weights()
        return self.learner.step

    def timings(self) -> dict[str, float]:
        """Seconds spent so far in each part of the receive path and on the device (TIMING_KEYS), and `clock`,
        the time.time() of this reading."""
        return {**self._seconds, "clock": time.time()}
