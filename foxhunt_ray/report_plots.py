"""The report's figures (foxhunt_ray.report): one per plot kind, the runs overlaid; `PLOTS`, file name -> builder.

pnl_cum_usd.png (the market), episode_return_mean.png (any other env: the mean return of the last 100 episodes),
qpa.png (qpa thin, qpa_ema thick, the kill threshold and the warm-up step), losses.png (one panel per loss),
values.png (V_dq against V_scalar), throughput.png (env steps/s and updates/s, each the growth of the count over a
trailing window of wall time, and over the whole run in the legend); a killed run's kill is marked (a vertical line
and the rule's name) at its step on every panel. A key a run does not log is left out of that run's lines; a
builder returns None when no run has data for it. Long runs are binned to at most `max_points` points per line.
Figures are drawn on the Agg canvas without pyplot (matplotlib is the `report` extra).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from foxhunt_ray.report_runs import RETURN_KEY, ReportError, Run, shows_return
from learner.diag import LOSS_KEYS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_POINTS = 2000
"""Points per plotted line; a longer run is binned (mean per bin) down to this."""


def downsample(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most max_points points: equal-count bins, each the mean of its finite values (NaN when it has none);
    the first and last points are kept as they are, so a line still starts and ends where the run does."""
    n = len(x)
    if n <= max_points or max_points < 3:
        return x.astype(float), y.astype(float)
    edges = np.linspace(1, n - 1, max_points - 1).astype(np.int64)  # interior bins over x[1:-1]
    finite = np.isfinite(y)
    y0 = np.where(finite, y, 0.0)
    cy = np.concatenate([[0.0], np.cumsum(y0)])
    cc = np.concatenate([[0], np.cumsum(finite)])
    cx = np.concatenate([[0.0], np.cumsum(x.astype(float))])
    lo, hi = edges[:-1], edges[1:]
    count = cc[hi] - cc[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        yb = np.where(count > 0, (cy[hi] - cy[lo]) / np.maximum(count, 1), np.nan)
    xb = (cx[hi] - cx[lo]) / (hi - lo)
    return np.concatenate([[x[0]], xb, [x[-1]]]).astype(float), np.concatenate([[y[0]], yb, [y[-1]]])


def smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over `window` lines of the finite values (NaN-aware); window 1 returns y."""
    if window <= 1:
        return y.astype(float)
    finite = np.isfinite(y)
    cy = np.concatenate([[0.0], np.cumsum(np.where(finite, y, 0.0))])
    cc = np.concatenate([[0], np.cumsum(finite)])
    idx = np.arange(1, len(y) + 1)
    lo = np.maximum(idx - window, 0)
    count = cc[idx] - cc[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, (cy[idx] - cy[lo]) / np.maximum(count, 1), np.nan)


def _series(run: Run, key: str, max_points: int, window: int = 1) -> tuple[np.ndarray, np.ndarray]:
    mask = run.present[key]
    return downsample(run.steps[mask], smooth(run.columns[key][mask], window), max_points)


def _figure(nrows: int = 1, ncols: int = 1, *, size: tuple[float, float] = (10, 5.5)):
    """A Figure on the Agg canvas, without pyplot: no display, no global figure state (headless, CI)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ModuleNotFoundError:  # an extra: cluster nodes do not need it
        raise ReportError(
            "the report's plots need matplotlib, which foxhunt-ray installs only as an extra: "
            "pip install 'foxhunt-ray[report]' (or pip install matplotlib)"
        ) from None

    fig = Figure(figsize=size, dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, list(axes.flat)


def _colour(i: int) -> str:
    return f"C{i % 10}"


def _mark_kill(ax, run: Run, colour: str) -> None:
    if run.kill_step is None:
        return
    ax.axvline(run.kill_step, color=colour, linestyle=":", linewidth=1.5)
    ax.annotate(
        f"kill: {run.kill.get('rule')} @ {run.kill_step}",
        xy=(run.kill_step, 0.98),
        xycoords=("data", "axes fraction"),
        xytext=(-3, 0),
        textcoords="offset points",
        rotation=90,
        ha="right",
        va="top",
        fontsize=8,
        color=colour,
    )


def _finish(ax, title: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("learner update (step)", fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.tick_params(labelsize=8)


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="0.4")


def plot_pnl(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    have = [(i, r) for i, r in enumerate(runs) if "pnl_cum_usd" in r.columns]
    if not have:
        return None
    fig, (ax,) = _figure()
    for i, r in have:
        ax.plot(*_series(r, "pnl_cum_usd", max_points), color=_colour(i), label=r.label, linewidth=1.6)
        _mark_kill(ax, r, _colour(i))
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.yaxis.set_major_formatter(lambda v, _: f"${v:,.0f}")
    _finish(ax, "pnl_cum_usd: cumulative final pnl of the ended episodes", "USD")
    ax.legend(fontsize=8)
    return fig


def plot_returns(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    """episode_return_mean of the runs on an env without pnl (CartPole, ...): how they learn, as pnl_cum_usd shows
    it for the market."""
    have = [(i, r) for i, r in enumerate(runs) if shows_return(r)]
    if not have:
        return None
    fig, (ax,) = _figure()
    for i, r in have:
        ax.plot(*_series(r, RETURN_KEY, max_points), color=_colour(i), label=r.label, linewidth=1.6)
        _mark_kill(ax, r, _colour(i))
    _finish(ax, f"{RETURN_KEY}: mean return of the last 100 ended episodes", "episode return")
    ax.legend(fontsize=8)
    return fig


def _groups(have: list[tuple[int, Run]], key: Callable[[Run], float]) -> list[tuple[float, list[tuple[int, Run]]]]:
    """(value, the (index, run) pairs that have it) for each distinct key(run), in increasing value."""
    return [(v, [(i, r) for i, r in have if key(r) == v]) for v in sorted({key(r) for _, r in have})]


def plot_qpa(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    have = [(i, r) for i, r in enumerate(runs) if "qpa" in r.columns or "qpa_ema" in r.columns]
    if not have:
        return None
    fig, (ax,) = _figure()
    for i, r in have:
        c = _colour(i)
        if "qpa" in r.columns:
            ax.plot(*_series(r, "qpa", max_points), color=c, linewidth=0.7, alpha=0.45)
        if "qpa_ema" in r.columns:
            ax.plot(*_series(r, "qpa_ema", max_points), color=c, linewidth=2.2, label=f"{r.label} qpa_ema")
        _mark_kill(ax, r, c)
    x_max = max(r.last_step for _, r in have)
    # One line per distinct threshold; one shared by every run is crimson / grey, else it takes its runs' colour
    # (the first of them) and names them.
    for threshold, who in _groups(have, lambda r: r.kill_config.qpa_ema_min):
        shared = len(who) == len(have)
        note = "" if shared else f" ({', '.join(r.label for _, r in who)})"
        colour = "crimson" if shared else _colour(who[0][0])
        ax.axhline(threshold, color=colour, linestyle="--", linewidth=1.2, label=f"kill: qpa_ema < {threshold:g}{note}")
    for warmup, who in _groups(have, lambda r: r.kill_config.qpa_warmup_steps):
        shared = len(who) == len(have)
        note = "" if shared else f" ({', '.join(r.label for _, r in who)})"
        if warmup <= x_max:
            colour = "0.3" if shared else _colour(who[0][0])
            label = f"qpa warm-up ends: step {warmup}{note}"
            ax.axvline(warmup, color=colour, linestyle="-.", linewidth=1.0, label=label)
        else:
            ax.plot([], [], " ", label=f"qpa warm-up: {warmup} steps, beyond the plot{note}")
    ax.set_ylim(-1.05, 1.05)
    _finish(ax, "qpa (thin) and qpa_ema (thick): corr(Q, log π) across actions", "qpa")
    ax.legend(fontsize=8, loc="lower left")
    return fig


def plot_losses(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    if not any(r.has(k) for r in runs for k in LOSS_KEYS):
        return None
    ncols = 3
    fig, axes = _figure(math.ceil(len(LOSS_KEYS) / ncols), ncols, size=(13, 7))
    for ax, key in zip(axes, LOSS_KEYS, strict=False):
        have = [(i, r) for i, r in enumerate(runs) if r.has(key)]
        finite_min = math.inf
        finite_span = 1.0
        for i, r in have:
            x, y = _series(r, key, max_points)
            ax.plot(x, y, color=_colour(i), linewidth=1.0, label=r.label)
            _mark_kill(ax, r, _colour(i))
            ok = y[np.isfinite(y)]
            if len(ok):
                finite_min = min(finite_min, float(ok.min()))
                finite_span = max(finite_span, float(ok.max()) / max(float(ok.min()), 1e-300))
        if not have:
            _no_data(ax, f"no run trains {key} (missing or 0 throughout)")
        elif finite_min > 0 and finite_span > 20:  # log only where all values are positive and span decades
            ax.set_yscale("log")
        _finish(ax, key, key)
    for ax in axes[len(LOSS_KEYS) :]:
        ax.set_visible(False)
    handles = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.legend(handles.values(), handles.keys(), loc="outside upper center", ncols=min(4, len(handles)), fontsize=8)
    return fig


def plot_values(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    have = [(i, r) for i, r in enumerate(runs) if r.has("v_dq_mean") or r.has("v_scalar_mean")]
    if not have:
        return None
    fig, (ax,) = _figure()
    for i, r in have:
        c = _colour(i)
        if r.has("v_dq_mean"):
            ax.plot(*_series(r, "v_dq_mean", max_points), color=c, linewidth=1.6, label=f"{r.label} V_dq")
        if r.has("v_scalar_mean"):
            no_dq = "" if r.has("v_dq_mean") else " (no dueling head)"
            ax.plot(
                *_series(r, "v_scalar_mean", max_points),
                color=c,
                linewidth=1.2,
                linestyle="--",
                label=f"{r.label} V_scalar{no_dq}",
            )
        _mark_kill(ax, r, c)
    _finish(ax, "V_dq (solid, dueling head) against V_scalar (dashed): batch means", "value")
    ax.legend(fontsize=8)
    return fig


THROUGHPUT_KEYS: dict[str, str] = {"env_steps_per_s": "env_steps", "updates_per_s": "step"}
"""A throughput panel -> the cumulative count of the step lines whose growth a second it shows."""
RESUME_GAP_S = 60.0
"""A gap between two step lines longer than this (and than the rate window) is a resume's downtime, not the run's."""


def _counts(run: Run, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, wall time, count) of the step lines that carry both the time and the count of THROUGHPUT_KEYS[key]."""
    count = THROUGHPUT_KEYS[key]
    if "time" not in run.columns or (count != "step" and count not in run.columns):
        return run.steps[:0], np.zeros(0), np.zeros(0)
    ok = run.present["time"] & (run.present[count] if count != "step" else True)
    c = run.steps.astype(float) if count == "step" else run.columns[count]
    return run.steps[ok], np.maximum.accumulate(run.columns["time"][ok]), c[ok]


def rate_window_s(run: Run) -> float:
    """The wall time a run's throughput is measured over: a 25th of the run's span, within [2 s, 60 s] (less for a
    run shorter than 8 s: a quarter of it)."""
    t = run.columns["time"][run.present["time"]] if "time" in run.columns else np.zeros(0)
    span = float(t.max() - t.min()) if len(t) else 0.0
    return min(60.0, max(span / 25, min(2.0, span / 4)))


def throughput(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, rate) for `key` of THROUGHPUT_KEYS at each step line: the count's growth over the trailing
    rate_window_s of wall time, divided by the time it took (NaN until the window is a quarter full, as after a
    resume's gap). Not the lines' own updates_per_s / env_steps_per_s: those are over the time since the line before,
    and the monitor writes the lines of one learner answer microseconds apart, so they spike to thousands a second
    and their mean ranks runs by how their lines bunch up, not by how fast they train."""
    steps, t, c = _counts(run, key)
    window = rate_window_s(run)
    if not len(t) or window <= 0:
        return steps, np.full(len(steps), np.nan)
    first = np.searchsorted(t, t - window, side="left")  # the oldest line within the window
    dt = t - t[first]
    with np.errstate(invalid="ignore", divide="ignore"):
        return steps, np.where(dt >= window / 4, (c - c[first]) / dt, np.nan)


def overall_rate(run: Run, key: str) -> float | None:
    """The count's growth a second over the run's wall time, a resume's downtime left out (gaps between lines longer
    than RESUME_GAP_S and the rate window); None without two timed lines."""
    _, t, c = _counts(run, key)
    if len(t) < 2:
        return None
    dt, dc = np.diff(t), np.diff(c)
    running = dt <= max(RESUME_GAP_S, rate_window_s(run))
    busy = float(dt[running].sum())
    return float(dc[running].sum()) / busy if busy > 0 else None


def plot_throughput(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    """env steps and updates a second, each run's over a trailing window of wall time, its rate over the whole run
    in the legend."""
    if not any(len(_counts(r, key)[1]) for r in runs for key in THROUGHPUT_KEYS):
        return None
    fig, axes = _figure(1, 2, size=(13, 5))
    for ax, key in zip(axes, THROUGHPUT_KEYS, strict=True):
        have = [(i, r) for i, r in enumerate(runs) if len(_counts(r, key)[1])]
        for i, r in have:
            overall = overall_rate(r, key)
            label = r.label + (f" ({overall:,.1f}/s over the run)" if overall is not None else "")
            ax.plot(*downsample(*throughput(r, key), max_points), color=_colour(i), linewidth=1.6, label=label)
            _mark_kill(ax, r, _colour(i))
        ax.set_ylim(bottom=0)
        if not have:
            _no_data(ax, f"no run logs the {THROUGHPUT_KEYS[key]} and time of its lines")
            _finish(ax, key, key)
            continue
        windows = sorted({rate_window_s(r) for _, r in have})
        over = f"{windows[0]:.3g} s" if len(windows) == 1 else f"{windows[0]:.3g}-{windows[-1]:.3g} s"
        _finish(ax, f"{key}: growth over the trailing {over} of wall time", key)
        ax.legend(fontsize=8)
    return fig


PLOTS: dict[str, tuple[Callable[..., Figure | None], str]] = {
    "pnl_cum_usd.png": (plot_pnl, "no run logs pnl_cum_usd (a market without pnl)"),
    "qpa.png": (plot_qpa, "no run logs qpa"),
    "losses.png": (plot_losses, "no run logs a nonzero loss"),
    "values.png": (plot_values, "no run logs v_dq_mean or v_scalar_mean"),
    "throughput.png": (plot_throughput, "no run logs the time of its lines"),
    "episode_return_mean.png": (plot_returns, "no run on an env other than the market (whose plot is pnl_cum_usd)"),
}
"""file name -> (figure builder, why the plot is skipped when it returns None)."""
