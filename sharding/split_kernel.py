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

__all__ = ["fit_splits", "pick_split", "price_splits"]


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


@njit(cache=True)
def _sum(mem: np.ndarray, t: int, s: int) -> float:
    """Σ of mem[t, i] over the pieces i whose bit is set in s, in ascending i."""
    x = 0.0
    for i in range(mem.shape[1]):
        if (s >> i) & 1:
            x += mem[t, i]
    return x


@njit(cache=True)
def fit_splits(mem: np.ndarray, on_b: int, used_a: np.ndarray, used_b: np.ndarray, thr: np.ndarray,
               pairs: np.ndarray, tol: float) -> tuple[np.ndarray, bool]:
    """(fit, sure): `lns._fit_reference`'s mask of the 2^n splits (bit i set: piece i on b) that fit memory in
    every tier t (mem[t, i]: piece i's bytes; thr[t]: the cap with its margin) and put the two column blocks of
    each row of `pairs` on distinct ranks; `on_b`: the bits of the pieces on b now. The sums run in another order
    than numpy's and BLAS's, so `sure` is False where a rank's bytes come within `tol` of a cap (then the order
    could decide the side: the caller asks the numpy path)."""
    T, n = mem.shape
    fit = np.ones(1 << n, dtype=np.bool_)
    full = (1 << n) - 1
    sums = np.zeros(1 << n)
    for t in range(T):
        if not np.any(mem[t] != 0):
            continue
        stay_a, on_bb, total = _sum(mem, t, full & ~on_b), _sum(mem, t, on_b), _sum(mem, t, full)
        for i in range(n):  # sums[s]: sums[s less its highest bit i] + mem[t, i], as `_sum` (ascending from 0)
            for s in range(1 << i, 1 << (i + 1)):
                sums[s] = sums[s - (1 << i)] + mem[t, i]
        for s in range(1 << n):
            to_b = sums[s]
            xa = used_a[t] - stay_a + total - to_b
            xb = used_b[t] - on_bb + to_b
            if abs(xa - thr[t]) <= tol or abs(xb - thr[t]) <= tol:
                return fit, False
            if xa > thr[t] or xb > thr[t]:
                fit[s] = False
    for j in range(pairs.shape[0]):
        i, k = pairs[j, 0], pairs[j, 1]
        for s in range(1 << n):
            if ((s >> i) & 1) == ((s >> k) & 1):
                fit[s] = False
    return fit, True


@njit(cache=True)
def _pairwise(x: np.ndarray, n: int) -> float:
    """numpy's sum of x[:n] (`np.add.reduce` of a contiguous run: its pairwise sum, 8 partial sums in a block of
    ≤ 128), float for float; tests/sharding/test_lns.py checks it against numpy."""
    if n < 8:
        res = -0.0
        for i in range(n):
            res += x[i]
        return res
    if n > 128:
        h = n // 2
        h -= h % 8
        return _pairwise(x, h) + _pairwise(x[h:], n - h)
    r = x[:8].copy()
    i = 8
    while i < n - n % 8:
        for j in range(8):
            r[j] += x[i + j]
        i += 8
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < n:
        res += x[i]
        i += 1
    return res


@njit(cache=True)
def _max(p: float, o: float) -> float:
    """`np.maximum` of two floats (NaN wins)."""
    return p if p >= o or p != p else o


@njit(cache=True)
def pick_split(peak: np.ndarray, out: np.ndarray, act: np.ndarray, still: np.ndarray, peaks: np.ndarray,
               lim: float, rest: float, eps: float) -> tuple[int, float]:
    """(q, obj): `lns._answer`'s numpy pick among the priced splits (their peaks `peak`, (m, K') over the active
    rows `act`): the first least obj = primary + eps · (rest + Σ peak) among those whose primary ≤ `lim`, where
    primary = Σ_k max(peak, out) plus the same sum over the rows `still` no piece touches (the pair's `peaks`
    there); q = −1 if none. Every sum is numpy's pairwise one, so the floats are numpy's."""
    m, kk = peak.shape
    buf = np.empty(max(kk, still.shape[0] + 1))
    fixed = 0.0  # numpy's sum of no rows
    if still.shape[0]:
        for j in range(still.shape[0]):
            buf[j] = _max(peaks[still[j]], out[still[j]])
        fixed = _pairwise(buf, still.shape[0])
    best, q, some = np.inf, 0, False  # as np.argmin over obj (inf where primary > lim): the first least
    for r in range(m):
        for j in range(kk - 1):
            buf[j] = _max(peak[r, j], out[act[j]])
        primary = fixed + _pairwise(buf, kk - 1)
        obj = np.inf
        if primary <= lim:
            some = True
            obj = primary + eps * (rest + _pairwise(peak[r], kk - 1))
        if obj != obj:  # np.argmin: the first NaN
            return r, obj
        if obj < best:
            best, q = obj, r
    return (q, best) if some else (-1, best)


_F1, _F2, _I2 = numba.float64[::1], numba.float64[:, ::1], numba.int64[:, ::1]
price_splits.compile((numba.boolean[::1], _F2, _F1, _F1, numba.float64, _I2, _F2))  # at import, from numba's disk
fit_splits.compile((_F2, numba.int64, _F1, _F1, _F1, _I2, numba.float64))
pick_split.compile((_F2, _F1, numba.int64[::1], numba.int64[::1], _F1, numba.float64, numba.float64, numba.float64))
# cache once compiled (as `search_kernels`'): ≈ 2 s of CPU once per checkout on the 2-core dev machine
