"""`pack.Builder.choose` for every table of the workload in one compiled pass (`Builder.choose_all`).

A packing's choice reads nothing of the loads: each table's pick depends on its own feasible options and the
arguments only. On random:1000:1/256 the optimizer asked `choose` 6,000 times a plan (a `_feasible` look-up, a few
list scans and a tuple each, 0.42 s profiled); here the same scans run over `Builder._price_all`'s option arrays,
table by table, with the same float comparisons (the same float64 values, read in the same order, first on ties),
so the same option is picked. tests/sharding/test_batched_options.py checks it against `choose` on every table.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

__all__ = ["choose_options"]


@njit(cache=True)
def choose_options(lo: np.ndarray, hi: np.ndarray, ok: np.ndarray, group: np.ndarray, work: np.ndarray,
                   largest: np.ndarray, most: np.ndarray, limit: float, uniform: int, mode: int, twrw_first: bool,
                   g_dp: int, g_tw: int, g_cw: int, g_twrw: int, out: np.ndarray) -> None:
    """out[i]: the option (index into the arrays) `choose` picks for table i, whose options are lo[i]:hi[i] and
    feasible where `ok`; −1 for `choose`'s last resort (row-wise over every rank). `uniform`: that type's group
    (−1: none); `mode` 0: split, 1: least work, 2 or 3: least work by model `mode` − 2 (`work` column)."""
    for i in range(lo.shape[0]):
        pick = -1
        if uniform >= 0 or mode >= 1:
            same, small, best, cheap = -1, -1, -1, -1
            for j in range(lo[i], hi[i]):
                if not ok[j]:
                    continue
                if same < 0 and group[j] == uniform:
                    same = j
                if small < 0 or largest[j] < largest[small]:
                    small = j
                if mode >= 2:
                    c = work[j, mode - 2]
                    if cheap < 0 or c < work[cheap, mode - 2] or (c == work[cheap, mode - 2]
                                                                  and largest[j] < largest[cheap]):
                        cheap = j
                elif largest[j] <= limit and (best < 0 or most[j] < most[best]):
                    best = j
            if uniform >= 0:
                pick = same if same >= 0 else small
            elif mode >= 2:
                pick = cheap
            else:
                pick = best if best >= 0 else small
            out[i] = pick
            continue
        tw, dp = -1, -1
        for j in range(lo[i], hi[i]):
            if ok[j]:
                if group[j] == g_tw:
                    tw = j
                elif group[j] == g_dp and dp < 0:
                    dp = j
        if dp >= 0 and tw >= 0 and most[dp] < most[tw]:
            pick = dp
        elif tw >= 0 and largest[tw] <= limit:
            pick = tw
        else:
            for step in range(2):
                g = (g_twrw if step == 0 else g_cw) if twrw_first else (g_cw if step == 0 else g_twrw)
                for j in range(lo[i], hi[i]):
                    if ok[j] and group[j] == g and (g == g_twrw or largest[j] <= limit):
                        pick = j
                        break
                if pick >= 0:
                    break
        out[i] = pick


_I1, _F1 = numba.int64[::1], numba.float64[::1]
choose_options.compile((_I1, _I1, numba.boolean[::1], _I1, numba.float64[:, ::1], _F1, _F1, numba.float64,
                        numba.int64, numba.int64, numba.boolean, numba.int64, numba.int64, numba.int64, numba.int64,
                        _I1))  # at import, from numba's disk cache once compiled (as `search_kernels`')
