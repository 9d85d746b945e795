"""Episode statistics over the rollout batches, and the names of the diag keys they fill.

The learner worker keeps one `EpisodeStats` and adds each batch's metadata to it; `diag()` is what every
diag.jsonl line carries about the episodes. The key names are constants here so that the driver's loops and
reports read exactly what is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PNL_CUM_USD = "pnl_cum_usd"
RETURN_CUM = "return_cum"
EPISODE_RETURN_MEAN = "episode_return_mean"
RETURN_WINDOW = 100
"""episode_return_mean is the mean return of the last RETURN_WINDOW episodes that ended, over all workers."""


@dataclass(kw_only=True)
class EpisodeStats:
    """Running totals over the batches' metadata: what the learner worker puts in each diag line (`diag()`).

    Wire version 1 carries one number per ended episode, episode_pnl_usd: the market's final pnl_usd, or, for
    an env without pnl (has_pnl=False), the episode's return. The market's reward is its change in equity, so
    its episode return is its pnl: return_cum and episode_return_mean mean the same for every env, and
    pnl_cum_usd is there only for the market.
    """

    has_pnl: bool = True
    """The env reports pnl_usd (the market); False for any other env: no pnl_cum_usd in the diag."""
    env_steps: int = 0
    episodes: int = 0
    return_cum: float = 0.0
    """Sum of the returns of every episode that ended so far, over all workers (= pnl_cum_usd for the market)."""
    recent_returns: list[float] = field(default_factory=list)
    """Returns of the last RETURN_WINDOW episodes that ended, oldest first."""
    pnl_cum_usd: float = 0.0
    """Sum of the final pnl_usd of every episode that ended so far, over all workers."""
    last_episode_pnl_usd: float = 0.0
    """Mean final pnl_usd of the episodes that ended in the latest batch that had any."""

    def add(self, meta: dict) -> None:
        returns = meta["episode_pnl_usd"]
        self.env_steps += int(meta["env_steps"])
        self.episodes += int(returns.size)
        if returns.size:
            self.return_cum += float(returns.sum())
            self.recent_returns = (self.recent_returns + returns.tolist())[-RETURN_WINDOW:]
            if self.has_pnl:
                self.pnl_cum_usd += float(returns.sum())
                self.last_episode_pnl_usd = float(returns.mean())

    @property
    def episode_return_mean(self) -> float | None:
        """Mean return of the last RETURN_WINDOW ended episodes; None before the first one ends."""
        return sum(self.recent_returns) / len(self.recent_returns) if self.recent_returns else None

    def diag(self) -> dict[str, float | int]:
        """env_steps, episodes, return_cum, episode_return_mean (once an episode ended) and, for the market,
        pnl_cum_usd."""
        out: dict[str, float | int] = {
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            RETURN_CUM: self.return_cum,
        }
        if (mean := self.episode_return_mean) is not None:
            out[EPISODE_RETURN_MEAN] = mean
        if self.has_pnl:
            out[PNL_CUM_USD] = self.pnl_cum_usd
        return out
