"""The four kill rules of the seed (docs/design.md, "diag.jsonl and the monitor"), as state over diag records.

Any one stops the run, checked on every learner step in this order:
  1. non_finite        nan_abort_step > 0, or any numeric value of the record is NaN or +-inf;
  2. qpa_collapse      qpa_ema + qpa_noise_z (2) x qpa_noise < qpa_ema_min (-0.3) at a step > qpa_warmup_steps:
                       qpa_ema must sit below the line by more than the per-update noise of qpa allows
                       (qpa_noise, see KillRules.check; ~0.005 on the market, ~0.15 with CartPole's two actions);
  3. dueling_explosion l_dueling > dueling_ratio_max (100) x the l_q reference: the baseline run's l_c51 at the
                       same step when a baseline is given and has that step, else this run's own reference,
                       the running mean of its l_c51 over the steps where C51 trained (l_c51 > 0);
  4. pnl_deficit       pnl_cum_usd < the baseline's pnl_cum_usd at the same step by more than pnl_deficit_usd
                       ($5M); only with a baseline that has that step.
The raw qpa is checked by rule 1 before it enters the EMA: a NaN never hides behind the smoothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated

from lobsim_env.validation import ConfigError, Int, Number, field_errors

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_KILLED = 3
"""Process exit codes of a run: done, crashed or misconfigured, stopped by a kill rule."""

RULE_NON_FINITE = "non_finite"
RULE_QPA = "qpa_collapse"
RULE_DUELING = "dueling_explosion"
RULE_PNL = "pnl_deficit"


@dataclass(kw_only=True, frozen=True)
class KillConfig:
    """Thresholds of the kill rules (defaults: the seed's kill criteria)."""

    qpa_ema_min: Annotated[float, Number(ge=-1, le=1, why="qpa is a correlation")] = -0.3
    """Kill when qpa_ema falls below this after the warm-up (the seed's broken runs read -0.8 to -0.96)."""
    qpa_ema_decay: Annotated[float, Number(ge=0, lt=1)] = 0.99
    """qpa_ema = decay * qpa_ema + (1 - decay) * qpa, starting at the first qpa (about a 100-step window)."""
    qpa_warmup_steps: Annotated[int, Int(ge=0)] = 200
    """The qpa rule is checked only at steps > this: early qpa of a random policy is noise around 0."""
    qpa_noise_z: Annotated[float, Number(ge=0)] = 2.0
    """The rule reads the bound qpa_ema + qpa_noise_z x qpa_noise, not qpa_ema alone; 0 gives the point estimate
    (the rule as the seed wrote it). qpa_noise is the per-update noise of qpa (a standard deviation), estimated
    from successive differences: sqrt(pi)/2 x EMA of |qpa_t - qpa_(t-1)| (same decay as qpa_ema), which a slow
    drift hardly moves and one jump (a sudden collapse) moves by (1 - decay) x the jump only. Why: with two actions
    a learning run's qpa is noisy enough to cross the point-estimate rule, while the market's collapses are far
    below it with little noise (the numbers: BENCHMARKS.md, "Other Gymnasium envs: CartPole-v1")."""
    dueling_ratio_max: Annotated[float, Number(gt=0)] = 100.0
    """Kill when l_dueling exceeds this multiple of the l_q reference (l_c51)."""
    dueling_min_reference: Annotated[float, Number(ge=0)] = 1e-6
    """A reference at or below this (C51 not trained yet) skips the dueling check instead of dividing by ~0."""
    pnl_deficit_usd: Annotated[float, Number(gt=0)] = 5e6
    """Kill when pnl_cum_usd trails the baseline's at the same step by more than this many USD."""

    def errors(self) -> list[str]:
        """Every problem as 'kill.field=value must ...'; empty when the config is usable."""
        return list(field_errors(self, "kill").values())


@dataclass(kw_only=True, frozen=True)
class KillDecision:
    """Why a run was stopped: the rule, the step, the values that fired it and the threshold."""

    rule: str
    step: int
    message: str
    values: dict = field(default_factory=dict)
    exit_code: int = EXIT_KILLED

    def to_record(self) -> dict:
        """The final diag.jsonl line of a killed run (told apart from step lines by its 'event' key)."""
        return {"event": "kill", "rule": self.rule, "step": self.step, "message": self.message, "values": self.values}


def non_finite_keys(record: dict, prefix: str = "") -> list[str]:
    """Keys (dotted for nested dicts) whose value is a non-finite float."""
    bad = []
    for key, value in record.items():
        if isinstance(value, dict):
            bad += non_finite_keys(value, f"{prefix}{key}.")
        elif isinstance(value, float) and not math.isfinite(value):
            bad.append(prefix + key)
    return bad


_NOISE_PER_ABS_DIFF = math.sqrt(math.pi) / 2
"""sd of independent normal errors per mean |difference of two of them| (E|e1 - e2| = 2 sd / sqrt(pi))."""


def _num(value) -> float | None:
    """value as a float when it is a real number (bools and strings are not), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class KillRules:
    """Keeps qpa_ema, qpa_noise and the own l_q reference; `check(record)` fills record['qpa_ema'] and
    record['qpa_noise'] and applies the rules."""

    def __init__(self, cfg: KillConfig, baseline: dict[int, dict] | None = None):
        if errs := cfg.errors():
            raise ConfigError(errs, "kill config")
        self.cfg = cfg
        self.baseline = baseline
        self.qpa_ema: float | None = None
        self.qpa_abs_diff = 0.0
        """EMA of |qpa_t - qpa_(t-1)|: for independent normal per-update errors of sd s, 2 s / sqrt(pi)."""
        self._last_qpa: float | None = None
        self._c51_sum = 0.0
        self._c51_count = 0

    def restore(self, records: list[dict]) -> None:
        """State after `records` (a resumed run's step lines): the last qpa_ema, qpa_noise and qpa, the l_c51
        running mean. A run written before qpa_noise existed restarts its noise estimate at 0."""
        for rec in records:
            self._add_c51(rec.get("l_c51"))
        if records:
            self.qpa_ema = _num(records[-1].get("qpa_ema"))
            noise = _num(records[-1].get("qpa_noise"))
            self.qpa_abs_diff = noise / _NOISE_PER_ABS_DIFF if noise is not None and math.isfinite(noise) else 0.0
            self._last_qpa = _num(records[-1].get("qpa"))

    @property
    def qpa_noise(self) -> float:
        """The per-update noise of qpa (a standard deviation), 0 before the second qpa."""
        return _NOISE_PER_ABS_DIFF * self.qpa_abs_diff

    def own_reference(self) -> float | None:
        """Running mean of this run's l_c51 over steps where C51 trained, None before the first."""
        return self._c51_sum / self._c51_count if self._c51_count else None

    def _add_c51(self, value) -> None:
        l_c51 = _num(value)
        if l_c51 is not None and math.isfinite(l_c51) and l_c51 > 0:
            self._c51_sum += l_c51
            self._c51_count += 1

    def check(self, record: dict) -> KillDecision | None:
        """Updates the state with `record` (a step line; sets record['qpa_ema']) and returns the first rule
        that fires, or None."""
        cfg, step = self.cfg, int(record["step"])
        qpa = _num(record.get("qpa"))
        if qpa is not None:
            d = cfg.qpa_ema_decay
            self.qpa_ema = qpa if self.qpa_ema is None else d * self.qpa_ema + (1 - d) * qpa
            if self._last_qpa is not None:
                self.qpa_abs_diff = d * self.qpa_abs_diff + (1 - d) * abs(qpa - self._last_qpa)
            self._last_qpa = qpa
        if self.qpa_ema is not None:
            record["qpa_ema"] = self.qpa_ema
            record["qpa_noise"] = self.qpa_noise
        self._add_c51(record.get("l_c51"))

        nan_abort = _num(record.get("nan_abort_step")) or 0.0
        bad = non_finite_keys(record)
        if bad or nan_abort > 0:
            values = {k: record[k] for k in bad if k in record}
            values["nan_abort_step"] = nan_abort
            what = f"non-finite {bad}" if bad else "a non-finite learner step"
            return KillDecision(
                rule=RULE_NON_FINITE, step=step, values=values,
                message=f"{what} at step {step} (nan_abort_step={nan_abort})",
            )  # fmt: skip
        bound = None if self.qpa_ema is None else self.qpa_ema + cfg.qpa_noise_z * self.qpa_noise
        if step > cfg.qpa_warmup_steps and bound is not None and bound < cfg.qpa_ema_min:
            return KillDecision(
                rule=RULE_QPA, step=step,
                values={"qpa": qpa, "qpa_ema": self.qpa_ema, "qpa_noise": self.qpa_noise, "qpa_ema_bound": bound,
                        "noise_z": cfg.qpa_noise_z, "threshold": cfg.qpa_ema_min},
                message=f"qpa_ema={self.qpa_ema:.4f} (+ {cfg.qpa_noise_z:g} x noise {self.qpa_noise:.4f} = {bound:.4f})"
                f" < {cfg.qpa_ema_min} at step {step}: pi ranks actions against Q",
            )  # fmt: skip
        base = self.baseline.get(step) if self.baseline else None
        l_dueling = _num(record.get("l_dueling"))
        if l_dueling is not None:
            ref, source = self.own_reference(), "own running mean of l_c51"
            if base is not None and _num(base.get("l_c51")) is not None:
                ref, source = _num(base["l_c51"]), "baseline l_c51 at this step"
            if ref is not None and ref > cfg.dueling_min_reference and l_dueling > cfg.dueling_ratio_max * ref:
                return KillDecision(
                    rule=RULE_DUELING, step=step,
                    values={"l_dueling": l_dueling, "reference": ref, "reference_source": source,
                            "ratio_max": cfg.dueling_ratio_max},
                    message=f"l_dueling={l_dueling:.6g} > {cfg.dueling_ratio_max:g} x {ref:.6g} ({source}) "
                    f"at step {step}",
                )  # fmt: skip
        pnl = _num(record.get("pnl_cum_usd"))
        base_pnl = _num(base.get("pnl_cum_usd")) if base is not None else None
        if pnl is not None and base_pnl is not None and base_pnl - pnl > cfg.pnl_deficit_usd:
            return KillDecision(
                rule=RULE_PNL, step=step,
                values={"pnl_cum_usd": pnl, "baseline_pnl_cum_usd": base_pnl, "deficit_max_usd": cfg.pnl_deficit_usd},
                message=f"pnl_cum_usd={pnl:,.0f} trails the baseline's {base_pnl:,.0f} by "
                f"{base_pnl - pnl:,.0f} > {cfg.pnl_deficit_usd:,.0f} USD at step {step}",
            )  # fmt: skip
        return None
