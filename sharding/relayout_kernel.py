"""`relayout._Delta.price`'s step formula over a trial's changed rows, compiled (numba): the current plan's per-row
maxima and sums are kept, only the rows a change touches are summed again, and TorchRec's rating of the trial is
the maximum of the current per-rank loads plus the change's. The numpy version copied the whole (rows, W) table and
took every row's maximum for each trial (issue 16: 499 trials on f41 of `sharding.family`, a third of step 6).

The sums are those of `_Delta.price_reference` in another order (equal to rounding, ~1e-16 of the step): the
prices only rule trials out within `relayout._MARGIN`, every decision is taken on exact prices.
tests/sharding/test_relayout.py checks both prices against `plan_cost` and the plans of both paths.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

__all__ = ["price_change"]


@njit(cache=True)
def price_change(sums: np.ndarray, rmax: np.ndarray, rsum: np.ndarray, rows: np.ndarray, delta: np.ndarray,
                 g: int, cgroup: np.ndarray, cmean: np.ndarray, tload: np.ndarray, tdelta: np.ndarray,
                 ) -> tuple[float, float, int, float]:
    """(Σ of the 3 work rows' maxima, the collectives' seconds of the groups present, the groups present as bits,
    TorchRec's maximum rank load) after adding `delta` (one row per entry of `rows`) to `sums` (rows: fwd, bwd,
    optimizer work; `g` shard counts per group; one per collective, of group `cgroup`, priced by the mean where
    `cmean`), whose rows' maxima and sums are `rmax` and `rsum`; `tdelta` is added to TorchRec's loads `tload`."""
    w = sums.shape[1]
    mx, sm = rmax.copy(), rsum.copy()
    for j in range(rows.shape[0]):
        r = rows[j]
        hi, tot = -np.inf, 0.0
        for k in range(w):
            v = sums[r, k] + delta[j, k]
            tot += v
            if v > hi:
                hi = v
        mx[r], sm[r] = hi, tot
    mask = 0
    for i in range(g):
        if mx[3 + i] > 0.5:
            mask |= 1 << i
    comms = 0.0
    for i in range(cgroup.shape[0]):
        if (mask >> cgroup[i]) & 1:
            comms += sm[3 + g + i] / w if cmean[i] else mx[3 + g + i]
    b = -np.inf
    for k in range(w):
        v = tload[k] + tdelta[k]
        if v > b:
            b = v
    return mx[0] + mx[1] + mx[2], comms, mask, b


_V, _M, _I = numba.float64[::1], numba.float64[:, ::1], numba.int64[::1]  # compiled at import (numba's disk cache)
price_change.compile((_M, _V, _V, _I, _M, numba.int64, _I, numba.boolean[::1], _V, _V))
