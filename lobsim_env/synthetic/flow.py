"""Seeded synthetic order flow for B books at once, with a planted latent-regime signal.

Each market event is one of: limit bid / ask (size 1..max_limit_size, at level d = 0, 1, ... from the inside:
a bid goes to best_ask - 1 - d, so d = 0 improves a spread wider than one tick and joins the best bid
otherwise), market buy / sell (1 or 2 units, taking at most the best level), or a one-unit cancel at level d
from the best that succeeds with probability min(1, q / queue_ref) for a level of size q (queue-reactive: long
queues shrink, short ones refill). Level d has probability proportional to level_decay**d, d < levels.

Planted signal: a latent regime z in {-1, 0, +1} per book, a Markov chain that jumps to one of the other two
states with probability regime_switch_prob per step. Market buys have probability market_rate/2 * (1 + s*z),
sells market_rate/2 * (1 - s*z), and limit bids / asks lean the same way at half strength, so the observable
signed trade flow and imbalance predict the next mid moves while z itself stays hidden. s = signal_strength.

Randomness: per book a 64-bit key (drawn from the env's np_random at reset) and a counter-based hash
(splitmix64 of key + counter * golden ratio), so book i of the vector env draws exactly what a single env with
the same key draws, with no Python loop over books and no per-book generator in the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lobsim_env.config import SyntheticConfig
from lobsim_env.synthetic import book as bk

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_U16 = 65536


def hash_draws(key: np.ndarray, counter: np.ndarray, n: int, *, out: np.ndarray | None = None) -> np.ndarray:
    """n 64-bit draws per book: uint64 [n, B], a pure function of (key[b], counter[b], slot).

    In place in `out` (uint64 [n, B]) when given: arrays this size are page-faulted in afresh by every
    allocation, which costs more than the arithmetic.
    """
    B = key.shape[0]
    x = np.empty((n, B), np.uint64) if out is None else out
    tmp = np.empty(B, np.uint64)
    c = counter.astype(np.uint64) * np.uint64(n)
    with np.errstate(over="ignore"):
        for i in range(n):  # row by row keeps every temporary small
            xi = x[i]
            np.add(c, np.uint64(i), out=xi)
            xi *= _GOLDEN
            xi += key
            np.right_shift(xi, np.uint64(30), out=tmp)
            xi ^= tmp
            xi *= _M1
            np.right_shift(xi, np.uint64(27), out=tmp)
            xi ^= tmp
            xi *= _M2
            np.right_shift(xi, np.uint64(31), out=tmp)
            xi ^= tmp
    return x


class SyntheticFlow:
    """Precomputed tables for the flow of one config; stateless across books (state lives in SyntheticState)."""

    def __init__(self, cfg: SyntheticConfig):
        self.cfg = cfg
        self._buffers: dict[tuple[int, int], dict[str, np.ndarray]] = {}
        s = cfg.signal_strength
        thresholds = []
        for z in (-1, 0, 1):
            probs = np.array(
                [
                    cfg.limit_rate / 2 * (1 + 0.5 * s * z),  # LIMIT_BID
                    cfg.limit_rate / 2 * (1 - 0.5 * s * z),  # LIMIT_ASK
                    cfg.market_rate / 2 * (1 + s * z),  # MARKET_BUY
                    cfg.market_rate / 2 * (1 - s * z),  # MARKET_SELL
                    cfg.cancel_rate / 2,  # CANCEL_BID
                ]
            )
            thresholds.append(np.round(np.cumsum(probs) * _U16).astype(np.int64))
        self.thresholds = np.array(thresholds)  # [3 regimes, 5]: event = 1 + #(u >= threshold)
        # The same as a lookup on the top 12 bits of the draw: etype_table[regime + 1, u >> 4] (P to 1/4096).
        u = (np.arange(4096) << 4) + 8
        self.etype_table = (1 + (u[None, :, None] >= self.thresholds[:, None, :]).sum(axis=2)).reshape(-1)
        w = cfg.level_decay ** np.arange(cfg.levels)
        cdf = np.cumsum(w / w.sum())
        # 8-bit draw -> level d, so that P(d) matches the decay to within 1/256.
        self.level_table = np.searchsorted(cdf, (np.arange(256) + 0.5) / 256).astype(np.int64)
        self.limit_size_table = 1 + (np.arange(256) * cfg.max_limit_size) // 256
        # An event's level is anchor best + offset: a limit bid at best_ask - 1 - d, a limit ask at
        # best_bid + 1 + d, a cancel at best - d (bids) / best + d (asks), a market order at its side's best.
        self.anchor = np.array([0, 1, 0, 1, 0, 0, 1], np.int64)
        self.off_sign = np.array([0, -1, 1, 0, 0, -1, 1], np.int64)
        self.off_const = np.array([0, -1, 1, 0, 0, 0, 0], np.int64)
        # Fused lookups for the hot path: offset by (etype, level byte), size by (is_market, size byte).
        self.offset_table = (self.off_sign[:, None] * self.level_table[None, :] + self.off_const[:, None]).ravel()
        self.size_table = np.concatenate([self.limit_size_table, 1 + (np.arange(256) >> 7)])

    def initial_regime(self, key: np.ndarray) -> np.ndarray:
        """The regime a book opens in: uniform on {-1, 0, +1}, from the key alone."""
        h = hash_draws(key, np.full(key.shape, 2**62, np.uint64), 1)[0]
        return (h % np.uint64(3)).astype(np.int64) - 1

    def step_regime(self, regime: np.ndarray, h: np.ndarray) -> np.ndarray:
        """One Markov step of the latent regime from 64-bit draws h [B]."""
        u = (h & np.uint64(0xFFFF)).astype(np.int64)
        jump = u < round(self.cfg.regime_switch_prob * _U16)
        other = 1 + ((h >> np.uint64(16)) & np.uint64(1)).astype(np.int64)  # 1 or 2 states ahead, mod 3
        return np.where(jump, (regime + 1 + other) % 3 - 1, regime)

    def prepare(self, h: np.ndarray, regime: np.ndarray) -> PreparedEvents:
        """Decodes 64-bit draws h [E, B] into E events per book, up to the quotes they are placed against.

        Bits: 4-15 event type (through the regime's probabilities), 16-23 level d, 24-31 size,
        32-47 cancel acceptance, 48-63 the cancel's place in the queue relative to the agent.
        The result lives in buffers this object reuses: it is valid until the next `prepare` of that shape.
        """
        E, B = h.shape
        w = self._workspace(E, B)
        # Bit fields as zero-copy little-endian views instead of shifts and masks.
        h = h.astype("<u8", copy=False)
        f16 = h.view(np.uint16).reshape(E, B, 4)
        f8 = h.view(np.uint8).reshape(E, B, 8)
        idx = w["idx"]
        np.right_shift(f16[:, :, 0], 4, out=idx, casting="unsafe")
        idx += ((regime + 1) * 4096)[None, :]
        etype = np.take(self.etype_table, idx, out=w["etype"])
        np.take(bk._EVENT_SIDE, etype, out=w["side"])
        np.take(self.anchor, etype, out=w["anchor"])
        np.add(etype, 1, out=idx)
        idx >>= 1  # kind: 1 limit, 2 market, 3 cancel
        np.equal(idx, 1, out=w["is_limit"])
        np.equal(idx, 2, out=w["is_market"])
        np.equal(idx, 3, out=w["is_cancel"])
        np.multiply(etype, 256, out=idx)
        idx += f8[:, :, 2]
        np.take(self.offset_table, idx, out=w["offset"])
        np.multiply(w["is_market"], 256, out=idx)
        idx += f8[:, :, 3]
        np.take(self.size_table, idx, out=w["size"])
        gate = w["cancel_gate"]
        gate[:] = f16[:, :, 2]  # widen first: uint16 * queue_ref would wrap
        gate *= self.cfg.queue_ref
        gate >>= 16
        w["cancel_u"][:] = f16[:, :, 3]
        return PreparedEvents(**{k: v for k, v in w.items() if k not in ("idx", "etype")})

    def _workspace(self, E: int, B: int) -> dict[str, np.ndarray]:
        if (E, B) not in self._buffers:
            ints = ("idx", "etype", "side", "anchor", "offset", "size", "cancel_gate", "cancel_u")
            w = {k: np.empty((E, B), np.int64) for k in ints}
            w.update({k: np.empty((E, B), bool) for k in ("is_limit", "is_market", "is_cancel")})
            self._buffers[(E, B)] = w
        return self._buffers[(E, B)]


@dataclass(kw_only=True, slots=True, frozen=True)
class PreparedEvents:
    """E events per book, [E, B] each; slot e's level is best[b, anchor] + offset (resolved when applied)."""

    side: np.ndarray
    is_limit: np.ndarray
    is_market: np.ndarray
    is_cancel: np.ndarray
    anchor: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    cancel_gate: np.ndarray
    """A cancel applies iff cancel_gate < others' size at the level: P = min(1, others / queue_ref)."""
    cancel_u: np.ndarray

    def apply(self, book: bk.BookState, e: int) -> None:
        """Applies slot e to the books (the level is resolved against the quotes as they are now)."""
        lvl = book.best.reshape(-1)[book.rows2 + self.anchor[e]] + self.offset[e]
        bk.apply_prepared(
            book,
            self.side[e],
            self.is_limit[e],
            self.is_market[e],
            self.is_cancel[e],
            lvl,
            self.size[e],
            self.cancel_u[e],
            self.cancel_gate[e],
        )
