"""The report's tables (foxhunt_ray.report): `runs_table(runs, steps=None) -> str`, `table_rows(runs, steps)`,
`evaluations_table(runs) -> str`.

The runs table, one row per run, holds the status (a kill with its rule, step and value, like the seed's
"❌ Cluster step 745: qpa=-0.93") and the values of qpa_ema, pnl_cum_usd (or episode_return_mean on another env),
l_c51 and l_dueling at equal steps (default_steps: 25 %, 50 % and 100 % of the shortest run), plus the newest
synthetic held-out evaluation when there is one. The evaluations table has every evaluation, one row each, with its
market; a real LOBSTER day's row says it has no oracle, and the notes under the table give its caveat in full.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from actors.kill_rules import RULE_DUELING, RULE_NON_FINITE, RULE_PNL, RULE_QPA
from actors.monitor import SUMMARY_FILE
from foxhunt_ray.evaluations import LOBSTER, SYNTHETIC, Evaluation, caveat, day_of, short_caveat
from foxhunt_ray.report_runs import RETURN_KEY, Run, label_runs, short_sha, shows_return

TABLE_KEYS: tuple[str, ...] = ("qpa_ema", "pnl_cum_usd", "l_c51", "l_dueling")
"""The diag keys the table shows at each of its steps for runs on the market (table_keys: other envs')."""
DEFAULT_FRACTIONS: tuple[float, ...] = (0.25, 0.5, 1.0)
"""Default table steps: these fractions of the shortest run's last step."""
MISSING = "—"


def default_steps(runs: Sequence[Run], fractions: Sequence[float] = DEFAULT_FRACTIONS) -> list[int]:
    """Steps every run reached: the fractions of the shortest run's last step (rounded, at least 1, unique)."""
    shortest = min(r.last_step for r in runs)
    return sorted({max(1, round(shortest * f)) for f in fractions})


def format_value(key: str, value: float | None) -> str:
    """A table cell: '—' for no value; qpa as +0.123, USD as $-1,234, losses with 4 significant digits."""
    if value is None:
        return MISSING
    if not math.isfinite(value):
        return str(value)
    if key.startswith("qpa"):
        return f"{value:+.3f}"
    if key.endswith("_usd") or key.startswith("pnl"):
        return f"${value:,.0f}"
    return f"{value:.4g}"


def status_cell(run: Run) -> str:
    """'✅ done', or a kill in the seed's style: '❌ qpa_collapse step 745: qpa_ema=-0.930'."""
    if run.status == "killed" and run.kill:
        rule, step, values = run.kill.get("rule"), run.kill.get("step"), run.kill.get("values") or {}
        if rule == RULE_QPA:
            what = f"qpa_ema={format_value('qpa_ema', values.get('qpa_ema'))}"
            what += f" < {values['threshold']:g}" if isinstance(values.get("threshold"), int | float) else ""
        elif rule == RULE_NON_FINITE:
            bad = [k for k in values if k != "nan_abort_step"]
            what = f"{bad[0]}={values[bad[0]]}" + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else "") if bad else ""
            what = what or f"nan_abort_step={values.get('nan_abort_step')}"
        elif rule == RULE_DUELING:
            what = f"l_dueling={format_value('l', values.get('l_dueling'))} > {values.get('ratio_max')} × ref"
        elif rule == RULE_PNL:
            what = f"pnl {format_value('pnl', values.get('pnl_cum_usd'))} vs baseline " + format_value(
                "pnl", values.get("baseline_pnl_cum_usd")
            )
        else:
            what = str(run.kill.get("message") or "")
        return f"❌ {rule} step {step}: {what}"
    step = (run.summary or {}).get("step", run.last_step)
    if run.status == "done":
        return "✅ done"
    if run.status == "stopped":
        return f"⏹ stopped step {step}"
    if run.status == "error":
        message = str((run.summary or {}).get("message") or "")[:80]
        return f"💥 error step {step}: {message}"
    return f"… {run.status} (no {SUMMARY_FILE}; last step {run.last_step})"


def _evaluation(run: Run) -> tuple[float | None, float | None, int | None]:
    """(held-out agent pnl_usd_mean, oracle_fraction, checkpoint_step) of the newest synthetic evaluation; None
    where absent."""
    ev = run.evaluation or {}

    def num(v) -> float | None:
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    agent = (ev.get("policies") or {}).get("agent") or {}
    step = ev.get("checkpoint_step")
    return num(agent.get("pnl_usd_mean")), num(ev.get("oracle_fraction")), step if isinstance(step, int) else None


def table_keys(runs: Sequence[Run]) -> tuple[str, ...]:
    """TABLE_KEYS, with episode_return_mean after qpa_ema when a run's outcome is its return (shows_return), and
    pnl_cum_usd left out when no run logs it but some run shows its return."""
    has_return = any(shows_return(r) for r in runs)
    has_pnl = any("pnl_cum_usd" in r.columns for r in runs)
    keys = [k for k in TABLE_KEYS if k != "pnl_cum_usd" or has_pnl or not has_return]
    if has_return:
        keys.insert(keys.index("qpa_ema") + 1, RETURN_KEY)
    return tuple(keys)


def table_rows(runs: Sequence[Run], steps: Sequence[int]) -> list[dict]:
    """One dict per run: label, preset, code, status, last_step, values {(key, step): float | None} for the keys
    of table_keys(runs), and the newest synthetic evaluation (eval_pnl_usd, oracle_fraction, eval_step; None where
    there is none)."""
    keys = table_keys(runs)
    rows = []
    for r in runs:
        pnl, frac, ev_step = _evaluation(r)
        rows.append(
            {
                "label": r.label,
                "preset": r.preset,
                "code": short_sha(r.code_sha),
                "status": status_cell(r),
                "last_step": r.last_step,
                "values": {(k, s): r.value(k, s) for k in keys for s in steps},
                "eval_pnl_usd": pnl,
                "oracle_fraction": frac,
                "eval_step": ev_step,
            }
        )
    return rows


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def runs_table(runs: Sequence[Run], steps: Sequence[int] | None = None) -> str:
    """The markdown table, one row per run, values at `steps` (default_steps when None). Labels the runs when they
    are not labelled yet."""
    if any(not r.label for r in runs):
        label_runs(runs)
    steps = list(steps) if steps else default_steps(runs)
    rows = table_rows(runs, steps)
    keys = table_keys(runs)
    with_eval = any(r.evaluation is not None for r in runs)
    head = ["run", "preset", "code_sha", "status", "last step"] + [f"{k}@{s}" for k in keys for s in steps]
    if with_eval:
        head += [SYNTHETIC_PNL, "oracle fraction", "eval ckpt"]
    align = ["---"] * 4 + ["---:"] * (len(head) - 4)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for row in rows:
        cells = [row["label"], row["preset"] or MISSING, row["code"], row["status"], str(row["last_step"])]
        cells += [format_value(k, row["values"][(k, s)]) for k in keys for s in steps]
        if with_eval:
            cells += [
                format_value("pnl_usd", row["eval_pnl_usd"]),
                MISSING if row["oracle_fraction"] is None else f"{row['oracle_fraction']:.3f}",
                MISSING if row["eval_step"] is None else str(row["eval_step"]),
            ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


SYNTHETIC_PNL = "synthetic held-out agent PnL"
"""The runs table's column: the newest synthetic evaluation only (a LOBSTER day's figure is never put there)."""
EVALUATION_COLUMNS = (
    "run",
    "market",
    "fold / day",
    "ckpt",
    "episodes × steps",
    "agent PnL ± sem",
    "agent sharpe",
    "best baseline",
    "oracle PnL",
    "oracle fraction",
    "caveat",
)
NO_ORACLE = "no oracle"


def _pnl(value) -> str:
    return format_value("pnl_usd", float(value)) if isinstance(value, int | float) else MISSING


def evaluation_cells(run: Run, ev: Evaluation) -> dict[str, str]:
    """One row of the evaluations table: EVALUATION_COLUMNS -> cell text."""
    rec, market = ev.record, ev.market
    policies = rec.get("policies") or {}
    agent = policies.get("agent") or {}
    baselines = {n: m.get("pnl_usd_mean") for n, m in policies.items() if n not in ("agent", "oracle")}
    baselines = {n: v for n, v in baselines.items() if isinstance(v, int | float)}
    best = max(baselines, key=baselines.get) if baselines else None
    sharpe, frac = agent.get("sharpe"), rec.get("oracle_fraction")
    no_oracle = market == LOBSTER
    return {
        "run": run.label,
        "market": {SYNTHETIC: "synthetic", LOBSTER: "LOBSTER (real day)"}.get(market, "unknown"),
        "fold / day": day_of(rec),
        "ckpt": str(rec.get("checkpoint_step", MISSING)),
        "episodes × steps": f"{rec.get('episodes', '?')} × {rec.get('horizon', '?')}",
        "agent PnL ± sem": f"{_pnl(agent.get('pnl_usd_mean'))} ± {_pnl(agent.get('pnl_usd_sem')).lstrip('$')}",
        "agent sharpe": f"{sharpe:.3f}" if isinstance(sharpe, int | float) else MISSING,
        "best baseline": f"{best} {_pnl(baselines[best])}" if best else MISSING,
        "oracle PnL": NO_ORACLE if no_oracle else _pnl((policies.get("oracle") or {}).get("pnl_usd_mean")),
        "oracle fraction": NO_ORACLE if no_oracle else (f"{frac:.3f}" if isinstance(frac, int | float) else MISSING),
        "caveat": short_caveat(rec),
    }


def evaluations_table(runs: Sequence[Run]) -> str:
    """Every evaluation of every run, one row each with its market; '' when no run has one. Under the table, a
    note when synthetic and LOBSTER rows stand together, and each LOBSTER row's caveat in full."""
    if any(not r.label for r in runs):
        label_runs(runs)
    pairs = [(r, ev) for r in runs for ev in r.evaluations]
    if not pairs:
        return ""
    order = {SYNTHETIC: 0, LOBSTER: 1}
    pairs.sort(key=lambda p: (runs.index(p[0]), order.get(p[1].market, 2), str(p[1].record.get("created", ""))))
    lines = ["| " + " | ".join(EVALUATION_COLUMNS) + " |", "|" + "|".join(["---"] * 4 + ["---:"] * 6 + ["---"]) + "|"]
    for r, ev in pairs:
        cells = evaluation_cells(r, ev)
        lines.append("| " + " | ".join(_cell(cells[c]) for c in EVALUATION_COLUMNS) + " |")
    markets = {ev.market for _, ev in pairs}
    notes = []
    if SYNTHETIC in markets and len(markets) > 1:
        notes.append(
            "Rows of different markets are not comparable: a synthetic held-out PnL and a LOBSTER-day PnL are in "
            "different contracts and units; compare each row with its own baselines."
        )
    for r, ev in pairs:
        text = caveat(ev.record)
        if text:
            notes.append(f"{r.label}, `{ev.path.name}`: {text}")
        elif ev.market not in order:
            notes.append(f"{r.label}, `{ev.path}`: no market recorded; re-run python -m foxhunt_ray.evaluate {r.path}")
    return "\n".join(lines) + "\n" + "".join(f"\n- {n}" for n in notes) + ("\n" if notes else "")
