"""Per-rank load and memory bookkeeping shared by the baselines and our optimizer."""
from __future__ import annotations

import numpy as np

from sharding.topology import Topology
from sharding.workload import PlanError

__all__ = ["Bins"]


class Bins:
    """Loads (any additive unit) and bytes used per tier for each rank, with the usable capacities."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.tiers = [t.name for t in topology.tiers]
        w = topology.world_size
        self.load = np.zeros(w)
        self.used = {t: np.zeros(w) for t in self.tiers}
        self.cap = {t: topology.usable(t) for t in self.tiers}

    def fits(self, mem: dict[str, float]) -> np.ndarray:
        """Boolean mask of ranks with room for `mem` in every tier."""
        ok = None  # a new array in any case: callers change it
        for t, b in mem.items():
            if b > 0:
                room = self.used[t] + b <= self.cap[t] * (1 + 1e-12)
                ok = room if ok is None else ok & room
        return np.ones(self.topology.world_size, dtype=bool) if ok is None else ok

    def add(self, rank: int, load: float, mem: dict[str, float]) -> None:
        self.load[rank] += load
        for t, b in mem.items():
            self.used[t][rank] += b

    def remove(self, rank: int, load: float, mem: dict[str, float]) -> None:
        self.add(rank, -load, {t: -b for t, b in mem.items()})

    def fits_rank(self, rank: int, mem: dict[str, float]) -> bool:
        return all(self.used[t][rank] + b <= self.cap[t] * (1 + 1e-12) for t, b in mem.items() if b > 0)

    def least_loaded(self, mem: dict[str, float]) -> int:
        """Least-loaded rank with room, or -1."""
        ok = self.fits(mem)
        if not ok.any():
            return -1
        return int(np.argmin(np.where(ok, self.load, np.inf)))

    def shortfall(self, mem: dict[str, float]) -> str:
        """Words for how far the emptiest rank is from holding `mem`."""
        parts = []
        for t, b in mem.items():
            free = float(self.cap[t] - self.used[t].min())
            if b > free:
                parts.append(f"{t}: needs {b / 1e9:.3f} GB, most free on any rank {max(free, 0) / 1e9:.3f} GB "
                             f"(short by {(b - free) / 1e9:.3f} GB)")
        return "; ".join(parts) or "no rank has room"


def no_room(table: str, bins: Bins, mem: dict[str, float]) -> PlanError:
    return PlanError(f"table {table!r} fits on no rank: {bins.shortfall(mem)}")
