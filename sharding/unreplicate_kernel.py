"""`pack._unreplicate`'s trial of one data-parallel table compiled (numba): its replicas taken off every rank, then
the table placed again sharded (table-row-wise on its best host, or one table-wise piece on its best rank), each
scored, on copies of the loads. The numpy version (`pack._unreplicate_reference`) snapshotted and restored the
(K, W) loads and ran a dozen numpy calls per trial; on random:1000:1 (256 ranks) that was 0.18 s of a packing's
finish, and on the small family instances per-call overhead.

Same floats as the numpy version: the take and the put subtract and add in `Loads.take_ranks` / `Loads.put`'s
order, the objective is `Loads.objective` (`search_kernels._objective`), the host and
the rank are picked by the same kernels (`host_scores`, `place_best`) and ties broken as `pack._lexmin` and a
Python tuple comparison break them. The fixed costs (`Loads.const_with`) are computed by the caller, in Python, from
the same sets of groups. tests/sharding/test_pack_fast_paths.py checks the packings against the numpy version.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

from sharding.search_kernels import _F, _F2, _LOADS, _better, _fits, _objective, _put, host_scores, place_best

__all__ = ["unreplicate_trial"]


@njit(cache=True)
def _lexmin_host(ok: np.ndarray, J: np.ndarray, S: np.ndarray) -> int:
    """`pack._lexmin`: the first host with the least secondary among those at the least J of the ok ones."""
    n = ok.shape[0]
    any_ok, jm = False, np.inf
    for x in range(n):
        if ok[x]:
            any_ok = True
            jm = min(jm, J[x])
    if not any_ok:
        return -1
    best, sm = 0, np.inf
    for x in range(n):
        v = S[x] if (J[x] if ok[x] else np.inf) == jm else np.inf
        if x == 0 or v < sm:
            best, sm = x, v
    return best


@njit(cache=True)
def unreplicate_trial(L, count, hold, weight, w0, w1, used, cap, const, gdp, v, mdp, c_off,  # noqa: ANN001, ANN201
                      gtwrw, tr_vecs, tr_mems, c_twrw, gtw, tv, tm, c_place, c_after):
    """One table of `pack._unreplicate`, the loads left as they are: replicas `v` (group gdp, bytes per tier mdp)
    off every rank (fixed cost then `c_off`); if that alone beats the objective (J, secondary) of L with fixed cost
    `const`, the table table-row-wise on its best host (shard i: tr_vecs[i], tr_mems[i], group gtwrw, fixed cost
    `c_twrw`; none tried if tr_vecs is empty) and one table-wise piece (tv, tm, group gtw) on the rank `place_best`
    picks with fixed cost `c_place`, scored with `c_after`; the lesser (J, secondary), TWRW first on ties.
    Returns (−1, −1) if no change beats the objective, else (0, host) for TWRW or (1, rank) for TW."""
    K, W = L.shape
    j0, s0 = _objective(L, w0, w1, const)
    Lo, co, uo = L.copy(), count.copy(), used.copy()
    for r in range(W):  # `Loads.take_ranks` on every rank
        co[gdp, r] -= 1
        if co[gdp, r] == 0:
            for k in range(K):
                Lo[k, r] -= hold[gdp, k]
        for k in range(K):
            Lo[k, r] -= v[k]
        for t in range(uo.shape[0]):
            uo[t, r] -= mdp[t]
    j, s = _objective(Lo, w0, w1, c_off)
    if not _better(j, s, 0.0, j0, s0):  # placing the table again only adds: no gain possible
        return -1, -1
    code, where, bj, bs = -1, -1, np.inf, np.inf
    if tr_vecs.shape[0] > 0:
        ok, J, S = host_scores(Lo, co, hold, w0, w1, c_twrw, gtwrw, tr_vecs, tr_mems, uo, cap)
        host = _lexmin_host(ok, J, S)
        if host >= 0:
            code, where, bj, bs = 0, host, J[host], S[host]
    fit = np.empty(W, dtype=np.bool_)
    for b in range(W):
        fit[b] = _fits(uo, cap, tm, b)
    r = place_best(Lo, co, hold, weight, w0, w1, c_place, gtw, tv, fit)
    if r >= 0:
        _put(Lo, co, hold, uo, tm, r, gtw, tv)
        j, s = _objective(Lo, w0, w1, c_after)
        if code < 0 or j < bj or (j == bj and s < bs):  # Python's (j, s) < (bj, bs)
            code, where, bj, bs = 1, r, j, s
    if code < 0 or not _better(bj, bs, 0.0, j0, s0):
        return -1, -1
    return code, where


_V, _G = numba.float64[::1], numba.int64  # compiled at import, as `search_kernels`' kernels (numba's disk cache)
_lexmin_host.compile((numba.boolean[::1], numba.float64[::1], numba.float64[::1]))  # `pack` calls it too
unreplicate_trial.compile((_F2, _LOADS[1], _F2, _V, _F, _F, _F2, _V, _F, _G, _V, _V, _F, _G, _F2, _F2, _F, _G, _V, _V,
                           _F, _F))
