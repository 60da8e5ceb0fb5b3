"""`lns._split`'s pricing of the 2^n splits of a pair's pieces, compiled (numba): one pass over the splits that
fit prices TorchRec's row of each (most splits exceed its cap there, f5: 53 of 1,973 are left), and only the
splits left get every row. The numpy version built two (2^n, K) products (`_bits(n) @ vecs`) and their holder
overheads for every split, about 1 ms a call at n = 12 (the largest cost of the slowest small instances).

Same floats as the numpy version: OpenBLAS's 0/1 matrix product sums each entry's pieces in ascending order from
0 (0 · v adds nothing), as the loops here do, and a holder overhead is added (or subtracted) after the sums, group
by group in the same order. tests/sharding/test_lns.py checks `lns._split` against `lns._split_reference`.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

__all__ = ["price_splits"]


@njit(cache=True)
def _pop(x: int) -> int:
    c = 0
    while x:
        x &= x - 1
        c += 1
    return c


@njit(cache=True)
def _row(s: int, k: int, vecs: np.ndarray, base_a: np.ndarray, base_b: np.ndarray) -> tuple[float, float]:
    """Row k of ranks a and b after split s (bit i set: piece i on b), holder overheads not yet added."""
    sa, sb = 0.0, 0.0
    for i in range(vecs.shape[0]):
        if (s >> i) & 1:
            sb += vecs[i, k]
        else:
            sa += vecs[i, k]
    return base_a[k] + sa, base_b[k] + sb


@njit(cache=True)
def _turns(s: int, j: int, grp: np.ndarray) -> tuple[int, int]:
    """(a, b): +1 where split s makes the rank a holder of group j, −1 where it stops being one, else 0."""
    nb = _pop(s & grp[j, 0])
    da = (1 if grp[j, 2] + grp[j, 1] - nb > 0 else 0) - grp[j, 4]
    db = (1 if grp[j, 3] + nb > 0 else 0) - grp[j, 5]
    return da, db


@njit(cache=True)
def price_splits(fit: np.ndarray, vecs: np.ndarray, base_a: np.ndarray, base_b: np.ndarray, t_lim: float,
                 grp: np.ndarray, g_hold: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(splits, la, lb): the splits s (ascending) with fit[s] whose TorchRec row (the last) is ≤ `t_lim` on both
    ranks, and their loads of ranks a and b, (m, K). Group j (holder overheads g_hold[j]): grp[j] = its pieces'
    bits, how many, ranks a's and b's count of it without the pair's pieces, 1 if a / b holds it now."""
    n_s, K, G = fit.shape[0], vecs.shape[1], grp.shape[0]
    keep = np.empty(n_s, np.int64)
    m = 0
    for s in range(n_s):
        if not fit[s]:
            continue
        ta, tb = _row(s, K - 1, vecs, base_a, base_b)
        for j in range(G):
            da, db = _turns(s, j, grp)
            h = g_hold[j, K - 1]
            if da > 0:
                ta += h
            elif da < 0:
                ta -= h
            if db > 0:
                tb += h
            elif db < 0:
                tb -= h
        if max(ta, tb) <= t_lim:
            keep[m] = s
            m += 1
    la, lb = np.empty((m, K)), np.empty((m, K))
    for q in range(m):
        s = keep[q]
        for k in range(K):
            la[q, k], lb[q, k] = _row(s, k, vecs, base_a, base_b)
        for j in range(G):
            da, db = _turns(s, j, grp)
            for k in range(K):
                h = g_hold[j, k]
                if da > 0:
                    la[q, k] += h
                elif da < 0:
                    la[q, k] -= h
                if db > 0:
                    lb[q, k] += h
                elif db < 0:
                    lb[q, k] -= h
    return keep[:m].copy(), la, lb


_F1, _F2, _I2 = numba.float64[::1], numba.float64[:, ::1], numba.int64[:, ::1]
price_splits.compile((numba.boolean[::1], _F2, _F1, _F1, numba.float64, _I2, _F2))  # at import, from numba's disk
# cache once compiled (as `search_kernels`'): ≈ 2 s of CPU once per checkout on the 2-core dev machine
