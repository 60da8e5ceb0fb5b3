"""`relayout._Delta.price`'s step formula over a trial's changed rows, compiled (numba): the current plan's per-row
maxima and sums are kept, only the rows the changed tables touch are summed again (less their old rows, plus their
new ones), and TorchRec's rating of the trial is the maximum of the current per-rank loads less the old tables'
plus the new ones'. The numpy version copied the whole (rows, W) table and took every row's maximum for each trial
(issue 16: 499 trials on f41 of `sharding.family`, a third of step 6).

The sums are those of `_Delta.price_reference` in another order (equal to rounding, ~1e-16 of the step): the
prices only rule trials out within `relayout._MARGIN`, every decision is taken on exact prices.
tests/sharding/test_relayout.py checks both prices against `plan_cost` and the plans of both paths.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

__all__ = ["over_cap", "price_change", "scatter_rows"]


@njit(cache=True)
def _add(vec: np.ndarray, r: int, rows: np.ndarray, block: np.ndarray, sign: float) -> None:
    for j in range(rows.shape[0]):
        if rows[j] == r:
            for k in range(vec.shape[0]):
                vec[k] += sign * block[j, k]


@njit(cache=True)
def _mark(touched: np.ndarray, rows: np.ndarray) -> None:
    for j in range(rows.shape[0]):
        touched[rows[j]] = True


@njit(cache=True)
def price_change(sums: np.ndarray, rmax: np.ndarray, rsum: np.ndarray, tload: np.ndarray,
                 ro1: np.ndarray, bo1: np.ndarray, rn1: np.ndarray, bn1: np.ndarray,
                 ro2: np.ndarray, bo2: np.ndarray, rn2: np.ndarray, bn2: np.ndarray,
                 g: int, cgroup: np.ndarray, cmean: np.ndarray) -> tuple[float, float, int, float]:
    """(Σ of the 3 work rows' maxima, the collectives' seconds of the groups present, the groups present as bits,
    TorchRec's maximum rank load) of `sums` (rows: fwd, bwd, optimizer work; `g` shard counts per group; one per
    collective, of group `cgroup`, priced by the mean where `cmean`; row maxima `rmax`, sums `rsum`) and TorchRec's
    loads `tload`, less one or two old tables (rows `ro`, values `bo`, one row per row of `ro` and TorchRec's loads
    last) and plus their new plans (`rn`, `bn`); the second table's rows are empty for a change of one. (The loads
    ride in the blocks' last row: four arguments fewer, ~0.5 µs of a call's ~3 µs dispatch.)"""
    n, w = sums.shape
    touched = np.zeros(n, dtype=np.bool_)
    _mark(touched, ro1)
    _mark(touched, rn1)
    _mark(touched, ro2)
    _mark(touched, rn2)
    mx, sm = rmax.copy(), rsum.copy()
    vec = np.empty(w)
    for r in range(n):
        if touched[r]:
            vec[:] = sums[r]
            _add(vec, r, ro1, bo1, -1.0)
            _add(vec, r, rn1, bn1, 1.0)
            _add(vec, r, ro2, bo2, -1.0)
            _add(vec, r, rn2, bn2, 1.0)
            hi, tot = -np.inf, 0.0
            for k in range(w):
                tot += vec[k]
                if vec[k] > hi:
                    hi = vec[k]
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
    two = ro2.shape[0] > 0
    o1, n1, o2, n2 = ro1.shape[0], rn1.shape[0], ro2.shape[0], rn2.shape[0]
    for k in range(w):
        v = tload[k] - bo1[o1, k] + bn1[n1, k]
        if two:
            v = v - bo2[o2, k] + bn2[n2, k]
        if v > b:
            b = v
    return mx[0] + mx[1] + mx[2], comms, mask, b


@njit(cache=True)
def scatter_rows(n: int, w: int, ints: np.ndarray, vals: np.ndarray, m: int, k: int) -> np.ndarray:
    """`relayout._Delta._entry`'s sums in one call: an (n, w) table, zero but for shapes s (rows `at[starts[s]:
    starts[s + 1]]`, values `vals[...]` alike, ranks `where[wstarts[s]:wstarts[s + 1]]`), each value added to its row
    at each of the shape's ranks, shape by shape, row by row, rank by rank: the order of `np.add.at` per shape and
    row in `_entry_reference`, so each element gets the same additions in the same order (repeats included). A
    row r < 0 is row n + r (the loads' and the tiers' rows, last, whose index the caller writes before knowing n).
    `ints`: `at` (as many as `vals`), `starts` (`m`), `where` (`k`) and `wstarts` (`m`) in one array (one conversion
    of the caller's lists, not four)."""
    a = vals.shape[0]
    at, starts, where, wstarts = ints[:a], ints[a:a + m], ints[a + m:a + m + k], ints[a + m + k:]
    out = np.zeros((n, w))
    for s in range(starts.shape[0] - 1):
        for j in range(starts[s], starts[s + 1]):
            r, v = at[j], vals[j]
            if r < 0:
                r += n
            for q in range(wstarts[s], wstarts[s + 1]):
                out[r, where[q]] += v
    return out


@njit(cache=True)
def over_cap(used: np.ndarray, cap: np.ndarray, n1: np.ndarray, n2: np.ndarray, m1: np.ndarray, m2: np.ndarray,
             two: bool) -> bool:
    """Whether some (tier i, rank k) of `after = used + (0 + n1 [+ n2]) - (0 + m1 [+ m2])` (the second table's
    arrays read only where `two`) exceeds both `cap[i]` and `used[i, k]`: `relayout._over_reference`'s numpy sums
    (Python's `sum` starts at 0), element by element in the same order."""
    for i in range(used.shape[0]):
        for k in range(used.shape[1]):
            a, b = 0.0 + n1[i, k], 0.0 + m1[i, k]
            if two:
                a, b = a + n2[i, k], b + m2[i, k]
            after = used[i, k] + a - b
            if after > cap[i] and after > used[i, k]:
                return True
    return False


_V, _M, _I = numba.float64[::1], numba.float64[:, ::1], numba.int64[::1]  # compiled at import (numba's disk cache)
price_change.compile((_M, _V, _V, _V, *((_I, _M) * 4), numba.int64, _I, numba.boolean[::1]))
scatter_rows.compile((numba.int64, numba.int64, _I, _V, numba.int64, numba.int64))
over_cap.compile((_M, _V, _M, _M, _M, _M, numba.boolean))
