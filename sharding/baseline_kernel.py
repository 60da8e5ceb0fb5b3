"""The greedy and round-robin baselines' placement loop (`baselines._place` table after table) compiled (numba).

The optimizer builds every baseline for each plan; on random:1000:1/256 that was 5,000 `_place` calls (a dict of
bytes, a `Bins.fits` mask, an argmin and an `add` each), 0.19 s profiled. Here the tables that fit in the fastest
tier are placed in one call, with `Bins.fits`'s comparisons, numpy's first-minimum argmin and `Bins.add`'s sums
in the same order, so the same ranks; a table that fits on no rank there stops the loop and `baselines` places it
as before (the next tier down), then the loop goes on. tests/sharding/test_baselines_kernel.py checks the plans
against the one-table-at-a-time path.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

__all__ = ["place_tables", "fit_ranks"]

_ROOM = 1 + 1e-12  # as `Bins.fits`: a tier fits up to its capacity × (1 + 1e-12)


@njit(cache=True)
def _fits(mems: np.ndarray, i: int, used: np.ndarray, r: int, cap: np.ndarray) -> bool:
    """Table i's bytes per tier fit on rank r (`Bins.fits`'s comparison, tier by tier)."""
    for x in range(mems.shape[1]):
        b = mems[i, x]
        if b > 0 and not used[x, r] + b <= cap[x] * _ROOM:
            return False
    return True


@njit(cache=True)
def place_tables(start: int, mems: np.ndarray, cap: np.ndarray, used: np.ndarray, load: np.ndarray,
                 keys: np.ndarray, round_robin: bool, ranks: np.ndarray) -> int:
    """Tables start, start + 1, ... (bytes per tier `mems[i]`) each onto a rank with room in every tier where it
    needs bytes: the least `load` (first on ties; `load` += keys[i] after), or with `round_robin` the first from
    rank i on (cyclically). `used` (tiers × ranks) and `load` change in place, ranks[i] is set. Returns the first
    table that fits on no rank (len(mems) when all are placed)."""
    w = load.shape[0]
    for i in range(start, mems.shape[0]):
        pick = -1
        for step in range(w):
            r = (i + step) % w if round_robin else step
            if not _fits(mems, i, used, r, cap):
                continue
            if round_robin:
                pick = r
                break
            if pick < 0 or load[r] < load[pick]:
                pick = r
        if pick < 0:
            return i
        load[pick] += 0.0
        for x in range(mems.shape[1]):
            used[x, pick] += mems[i, x]
        load[pick] += keys[i]
        ranks[i] = pick
    return mems.shape[0]


@njit(cache=True)
def fit_ranks(i: int, mems: np.ndarray, cap: np.ndarray, used: np.ndarray, out: np.ndarray) -> int:
    """The ranks with room for table i (bytes per tier `mems[i]`, `Bins.fits`'s comparisons) in rank order in
    out[:k], as `np.flatnonzero(bins.fits(mem))`; returns k (the random baseline draws among them in Python)."""
    k = 0
    for r in range(used.shape[1]):
        if _fits(mems, i, used, r, cap):
            out[k] = r
            k += 1
    return k


_F1, _F2 = numba.float64[::1], numba.float64[:, ::1]
# at import, from numba's disk cache once compiled (as `search_kernels`')
place_tables.compile((numba.int64, _F2, _F1, _F2, _F1, _F1, numba.boolean, numba.int64[::1]))
fit_ranks.compile((numba.int64, _F2, _F1, _F2, numba.int64[::1]))
