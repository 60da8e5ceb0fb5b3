"""`pack.retype`'s column-wise merge trial compiled (numba): a column-wise table's blocks taken off their ranks, the
table placed again as one table-wise piece on its best rank, and scored, on copies of the loads. The numpy version
(`pack._merge_reference`) snapshotted and restored the (K, W) loads and ran a dozen numpy calls per trial; the
trial runs for every column-wise piece among the hottest ranks' largest, each retype round (f41: most of `retype`'s
time outside `_try_split`).

Same floats as the numpy version: the takes and the put subtract and add in `Loads.take` / `Loads.put`'s order,
the rank is the one `place_best` picks among those `_fits` allows (`_place_new`), the objective is
`Loads.objective` (`search_kernels._objective`) and the acceptance `search_kernels.better`. The fixed costs
(`Loads.const_with`, `Loads.respread`) are computed by the caller, in Python, from the same sets of groups.
tests/sharding/test_pack_fast_paths.py checks `retype` against `retype_reference`.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

from sharding.search_kernels import (
    _F,
    _F2,
    _LOADS,
    _better,
    _fits,
    _objective,
    _put,
    _score,
    _take,
    place_best,
    place_cut,
)

__all__ = ["best_cut", "merge_trial", "replicas_score"]


@njit(cache=True)
def merge_trial(L, count, hold, weight, w0, w1, used, cap, gcw, ranks, cv, cm, gtw, tv, tm, c_place, c_after,  # noqa: ANN001, ANN201
                j0, s0) -> int:
    """The blocks (each: vector `cv`, bytes per tier `cm`, group gcw) off `ranks` in turn, then one table-wise piece
    (tv, tm, group gtw) on the rank `place_best` picks among those it fits (fixed cost `c_place`), scored with
    fixed cost `c_after`. Returns that rank if the result beats (j0, s0) by `better`, else −1 (also if no rank
    fits). The loads are left as they are."""
    W = L.shape[1]
    Lo, co, uo = L.copy(), count.copy(), used.copy()
    for i in range(ranks.shape[0]):
        _take(Lo, co, hold, uo, cm, ranks[i], gcw, cv)
    fit = np.empty(W, dtype=np.bool_)
    for b in range(W):
        fit[b] = _fits(uo, cap, tm, b)
    r = place_best(Lo, co, hold, weight, w0, w1, c_place, gtw, tv, fit)
    if r < 0:
        return -1
    _put(Lo, co, hold, uo, tm, r, gtw, tv)
    j, s = _objective(Lo, w0, w1, c_after)
    return r if _better(j, s, 0.0, j0, s0) else -1



@njit(cache=True)
def replicas_score(L, count, hold, w0, w1, g, v, const):  # noqa: ANN001, ANN201
    """`Loads.objective` once one replica `v` (group g) sits on every rank (`Loads.put_ranks`' sums: the holder
    overhead, then the vector), with fixed cost `const`; the loads are left as they are (`pack._try_split`'s
    data-parallel re-cut, which snapshotted, put, scored and restored the (K, W) loads)."""
    K, W = L.shape
    top = np.empty(K)
    for k in range(K):
        m = -np.inf
        for r in range(W):
            x = (L[k, r] + hold[g, k] * (1.0 if count[g, r] == 0 else 0.0)) + v[k]
            if x > m:
                m = x
        top[k] = m
    return _score(top, w0, w1, const, True)


@njit(cache=True)
def best_cut(L, count, hold, weight, w0, w1, const, w, spread, c_first, c_after, was, sps, g, vecs, mems, used, cap,  # noqa: ANN001, ANN201
             ks, j0):
    """`pack._best_cut_reference`'s loop: re-cut i (ks[i] column blocks, vector vecs[i], bytes per tier mems[i],
    spread sps[i]) placed by `place_cut` with the fixed costs that loop computes (`Loads.const_with`: `c_first` or
    `c_after`, the groups' fixed seconds, + (spread + d) / W; the loads' `const` + d / w; d = sps[i] − was), in the
    same order. Returns (i, ranks, J, secondary) of the first re-cut with the least (J, secondary) among those
    that fit (Python's tuple order), i = −1 if none."""
    W = L.shape[1]
    bi, branks, bj, bs = -1, np.empty(0, dtype=np.int64), 0.0, 0.0
    for i in range(ks.shape[0]):
        d = sps[i] - was
        ranks, j, s = place_cut(L, count, hold, weight, w0, w1, const + d / w, c_first + (spread + d) / W,
                                c_after + (spread + d) / W, g, vecs[i], mems[i], used, cap, ks[i], j0)
        if ranks.shape[0] > 0 and (bi < 0 or j < bj or (j == bj and s < bs)):
            bi, branks, bj, bs = i, ranks, j, s
    return bi, branks, bj, bs


_V, _G = numba.float64[::1], numba.int64  # compiled at import, as `search_kernels`' kernels (numba's disk cache)
merge_trial.compile((_F2, _LOADS[1], _F2, _V, _F, _F, _F2, _V, _G, numba.int64[::1], _V, _V, _G, _V, _V, _F, _F, _F,
                     _F))
replicas_score.compile((_F2, _LOADS[1], _F2, _F, _F, _G, _V, _F))
best_cut.compile((_F2, _LOADS[1], _F2, _V, _F, _F, _F, _G, _F, _F, _F, _F, _V, _G, _F2, _F2, _F2, _V, numba.int64[::1], _F))
