"""LRU miss-ratio curves over every capacity in one pass (Mattson stack distances), plots, and the planner hook.

A request's LRU stack distance is 1 + the number of distinct keys touched since its key's previous request; an
LRU cache of C rows hits exactly the requests with distance ≤ C. Distances are counted with a Fenwick tree over
request positions holding a 1 at each key's latest position: O(n log n) for the whole curve.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import numpy as np
from numba import njit

from embedding.cache.simulate import CacheInputError, dense_ids
from embedding.files import umask_mode

__all__ = ["MissRatioCurve", "lru_mrc", "stack_distances", "miss_rate_at", "slow_tier_bytes_at", "plot_mrc"]


@njit(cache=True)
def stack_distances(ids: np.ndarray, n_ids: int) -> np.ndarray:
    """Per request its LRU stack distance (1 = re-request of the most recent key), 0 for a first request."""
    n = ids.size
    tree = np.zeros(n + 1, np.int64)  # Fenwick tree over positions 1..n
    last = np.full(n_ids, -1, np.int64)
    out = np.zeros(n, np.int64)
    for i in range(n):
        k = ids[i]
        p = last[k]
        if p >= 0:
            s = 0  # marks in positions (p, i): prefix(i) - prefix(p + 1), 1-based
            j = i
            while j > 0:
                s += tree[j]
                j -= j & -j
            j = p + 1
            while j > 0:
                s -= tree[j]
                j -= j & -j
            out[i] = s + 1
            j = p + 1
            while j <= n:
                tree[j] -= 1
                j += j & -j
        j = i + 1
        while j <= n:
            tree[j] += 1
            j += j & -j
        last[k] = i
    return out


@dataclass(frozen=True)
class MissRatioCurve:
    """LRU miss ratio at every capacity 1..distinct (beyond it the ratio stays at the compulsory one).
    `table_rows` sizes cache fractions (defaults to the distinct keys seen)."""

    capacities: np.ndarray  # (distinct,) int64: 1..distinct
    miss_ratio: np.ndarray  # (distinct,) float64
    requests: int
    distinct: int
    table_rows: int

    def misses_at(self, capacity_rows: int) -> int:
        """Exact LRU misses with `capacity_rows` rows (0 rows: every request misses)."""
        if capacity_rows <= 0:
            return self.requests
        c = min(int(capacity_rows), self.distinct)
        return int(round(self.miss_ratio[c - 1] * self.requests))

    def at(self, capacity_rows: int) -> float:
        return self.misses_at(capacity_rows) / self.requests if self.requests else 0.0


def lru_mrc(keys: np.ndarray, table_rows: int | None = None) -> MissRatioCurve:
    """LRU miss-ratio curve of a key stream over all capacities, from one stack-distance pass."""
    keys = np.asarray(keys)
    if keys.ndim != 1 or not np.issubdtype(keys.dtype, np.integer):
        raise CacheInputError(f"keys must be a 1-D integer array, got shape {keys.shape} dtype {keys.dtype}")
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    ids, uniq = dense_ids(keys)
    u = uniq.size
    if table_rows is not None and table_rows < u:
        raise CacheInputError(f"table_rows {table_rows} is below the {u} distinct keys of the stream")
    hist = np.bincount(stack_distances(ids, u), minlength=u + 1)  # hist[0]: first requests
    hits = np.cumsum(hist[1:])  # hits[c-1]: requests with distance ≤ c
    n = keys.size
    ratio = (n - hits) / n if n else np.zeros(u)
    return MissRatioCurve(np.arange(1, u + 1, dtype=np.int64), ratio.astype(np.float64), n, u,
                          int(table_rows) if table_rows is not None else u)


def miss_rate_at(mrc: MissRatioCurve, fraction: float) -> float:
    """Expected LRU miss rate when a cache holds `fraction` of the table's rows (the sharding cost model's hook)."""
    if not 0 <= fraction <= 1:
        raise CacheInputError(f"cache fraction must be in [0, 1], got {fraction}")
    return mrc.at(int(fraction * mrc.table_rows))


def slow_tier_bytes_at(mrc: MissRatioCurve, fraction: float, row_bytes: float) -> float:
    """Bytes read from the slow tier over the profiled stream: misses × row_bytes."""
    return mrc.misses_at(int(fraction * mrc.table_rows)) * float(row_bytes)


def plot_mrc(curves: dict[str, MissRatioCurve], path: str, title: str = "LRU miss-ratio curve") -> str:
    """Write a PNG of miss ratio against cache size (fraction of table rows, log x); returns the path.
    Written to a temporary file and renamed, so a failed plot leaves nothing behind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, c in curves.items():
        ax.plot(c.capacities / c.table_rows, c.miss_ratio, label=f"{name} ({c.requests} req, {c.distinct} keys)")
    ax.set_xscale("log")
    ax.set_xlabel("cache size (fraction of table rows)")
    ax.set_ylabel("miss ratio")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=directory)
    os.fchmod(fd, umask_mode())  # mkstemp's 0600 → what open() would give
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)
    return path
