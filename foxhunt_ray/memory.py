"""What a run's config needs in memory, estimated before anything is allocated.

`errors(config, driver, spaces)` is called by the driver after the config and the env are checked and before the
run folder is made: a config whose estimate exceeds the memory this machine has available (MemAvailable) is
refused with the fields that take the most and what fits, in the config's error style. The estimate counts every
role on this machine (serial mode, or a local Ray run) and the learner's device-resident state on the host too
(a checkpoint copies the replay and the network there). Bytes per part, measured on the default market
(tracemalloc, 2,048 books): a synthetic book holds about 2.3 KB plus 8 bytes per window tick. The other terms
are the arrays' own sizes. It is an estimate: it refuses only what cannot fit, it does not promise a fit.
Also refused: a rollout whose payload exceeds the wire's limits (every payload would be dropped as bad).
"""

from __future__ import annotations

from actors.envs import EnvSpaces, is_market
from actors.wire import DEFAULT_LIMITS, WireLimits
from learner.config import LearnerConfig
from learner.network import IQN_EMBED_DIM
from lobsim_env.lobster.files import PARSE_BYTES_PER_TEXT_BYTE, available_memory, day_text_bytes

BOOK_BYTES = 4096
"""Bytes of one synthetic book besides its window (2.3 KB measured, rounded up)."""
BOOK_BYTES_PER_TICK = 8
ENV_BYTES = 1024
"""Bytes of one env of another Gymnasium id besides its observation (a guess: such envs are small)."""
PARAM_COPIES = 7
"""Float32 copies of each learner parameter: weights, gradient, target, Adam's two moments, the undo snapshot
of a non-finite step, the published policy."""


def payload_bytes(num_envs: int, steps: int, obs_dim: int) -> int:
    """Bytes of one rollout payload (actors.wire): obs [T+1, B, D] f32, the [T, B] step columns (19 bytes a step),
    env_ids and pnl_usd, up to B ended episodes."""
    return (steps + 1) * num_envs * obs_dim * 4 + steps * num_envs * 19 + num_envs * 32 + 4096


def learner_params(cfg: LearnerConfig, obs_dim: int, n_actions: int) -> int:
    """Parameters of MainNet (and the dueling head when on), counted from the sizes (nothing is built)."""
    h, a = cfg.hidden_dim, n_actions
    p = obs_dim * h + h + (cfg.encoder_layers - 1) * (h * h + h)
    p += h * a * cfg.n_atoms + a * cfg.n_atoms  # c51
    p += IQN_EMBED_DIM * h + h + h * a + a  # iqn
    p += h * a + a + h + 1  # pi, v
    p += (h + 1) * (bool(cfg.c51_scalar_v) + (cfg.iqn_dueling != "off"))
    if cfg.dueling_mode != "off":
        p += h + 1 + h * a + a
    return p


def estimate(config, driver, spaces: EnvSpaces) -> dict[str, tuple[int, str]]:
    """{part: (bytes, the fields that set it)} for the run's config on this machine."""
    lrn, ro, m = config.learner, config.rollout, config.market
    workers, b, t, d = driver.rollout_workers, ro.num_envs, ro.steps_per_sample, spaces.obs_dim
    market = is_market(config.env_id)
    if market:
        book = BOOK_BYTES + BOOK_BYTES_PER_TICK * m.synthetic.window_ticks
        book_fields = "rollout.num_envs x market.synthetic.window_ticks"
    else:
        book, book_fields = ENV_BYTES + 16 * d, "rollout.num_envs"
    pay = payload_bytes(b, t, d)
    out = {
        "books": (workers * b * book, f"{book_fields} x driver.rollout_workers"),
        "rollout buffers": (
            workers * 2 * pay,
            "rollout.num_envs x rollout.steps_per_sample x obs_dim x driver.rollout_workers",
        ),
        "payloads in flight": (
            (driver.max_payloads_waiting + workers) * pay + 3 * pay,
            "rollout.num_envs x rollout.steps_per_sample x driver.max_payloads_waiting",
        ),
        "replay": (lrn.replay_capacity * (8 * d + 16), "learner.replay_capacity x obs_dim"),
        "network": (
            PARAM_COPIES * 4 * learner_params(lrn, d, spaces.n_actions) + workers * 4 * (d * lrn.hidden_dim),
            "learner.hidden_dim, learner.encoder_layers, learner.n_atoms",
        ),
        "replay batch activations": (
            12 * lrn.q_batch_size * lrn.hidden_dim * (lrn.iqn_taus + lrn.iqn_target_taus + 8),
            "learner.q_batch_size x learner.hidden_dim x learner.iqn_taus",
        ),
        "rollout activations": (
            12 * t * (lrn.minibatch_envs or b) * lrn.hidden_dim * (lrn.encoder_layers + 2),
            "rollout.num_envs (or learner.minibatch_envs) x rollout.steps_per_sample x learner.hidden_dim",
        ),
    }
    if market and m.source == "lobster" and m.lobster_path:
        text = day_text_bytes(m.lobster_path)
        out["LOBSTER day"] = ((workers + 1) * PARSE_BYTES_PER_TEXT_BYTE * text, "market.lobster_path (each worker)")
    return out


def _gib(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB"


def errors(config, driver, spaces: EnvSpaces, *, limits: WireLimits = DEFAULT_LIMITS, available: int | None = None):
    """The config's memory errors: a payload over the wire's limits, or an estimate over what is available."""
    errs = []
    ro = config.rollout
    b, t, d = ro.num_envs, ro.steps_per_sample, spaces.obs_dim
    pay, elements = payload_bytes(b, t, d), (t + 1) * b * d
    if pay > limits.max_payload_bytes or elements > limits.max_elements:
        fit = max(1, min(limits.max_payload_bytes // max(pay // b, 1), limits.max_elements // ((t + 1) * d)))
        errs.append(
            f"rollout.num_envs={b} x rollout.steps_per_sample={t} x obs_dim {d} makes payloads of {_gib(pay)} "
            f"({elements:,} obs values), over the wire's {_gib(limits.max_payload_bytes)} / {limits.max_elements:,}: "
            f"every payload would be dropped; at most rollout.num_envs={fit} at this steps_per_sample"
        )
    parts = estimate(config, driver, spaces)
    total = sum(n for n, _ in parts.values())
    avail = available_memory() if available is None else available
    if total > avail:
        ranked = sorted(parts.items(), key=lambda kv: -kv[1][0])
        named = ", ".join(f"{k} {_gib(n)} ({fields})" for k, (n, fields) in ranked[:3])
        hint = _fits(config, parts, ranked[0][0], avail)
        errs.append(
            f"this config needs about {_gib(total)} of memory, this machine has {_gib(avail)} available: {named}; "
            f"{hint}(docs/input-limits.md)"
        )
    return errs


BY_NUM_ENVS = ("books", "rollout buffers", "payloads in flight", "rollout activations")
"""The parts that grow with rollout.num_envs."""


def _fits(config, parts: dict, part: str, avail: int) -> str:
    """What fits of the largest part's main field with the rest as it is (linear parts; the network grows as
    hidden_dim squared)."""
    lrn, ro = config.learner, config.rollout
    group = BY_NUM_ENVS if part in BY_NUM_ENVS else (part,)
    grows = sum(parts[k][0] for k in group if k in parts)
    room = avail - (sum(n for n, _ in parts.values()) - grows)
    if room <= 0:
        return "even without it the rest does not fit: lower several sizes "
    share = room / max(grows, 1)
    if part in BY_NUM_ENVS:
        return f"at most about rollout.num_envs={max(1, int(ro.num_envs * share))} fits with the rest as it is "
    if part == "replay":
        return f"at most about learner.replay_capacity={max(1, int(lrn.replay_capacity * share))} fits "
    if part == "network":
        return f"at most about learner.hidden_dim={max(1, int(lrn.hidden_dim * share**0.5))} fits "
    if part == "replay batch activations":
        return f"at most about learner.q_batch_size={max(1, int(lrn.q_batch_size * share))} fits "
    return f"lower what sets the {part} "
