"""The planner's hot loops compiled (numba), so that each step costs one call instead of a dozen numpy calls on
(resources × ranks) arrays: a hot rank's moves and swaps in `search.local_search` (`try_rank`), the greedy
placement of a piece (`place_best`), a column-wise re-cut trial of `pack.retype` (`place_cut`), a table-row-wise
group on every host (`host_scores`) and a vector's summary (`summary`). A packing's fixed shards (`put_blocks`),
its table-row-wise groups (`place_groups`) and its greedy placement of movable pieces (`place_all`) are each one
call instead of a Python loop over tables or pieces.

Each kernel repeats the numpy code it replaces (`Loads.move_scores`, `swap_scores`, `place_scores`,
`host_scores_reference`, `take`/`put`, `best_of`, `_better`) in the same order of float operations, so plans are
bitwise the same. numpy sums a row-major (K, n) array over axis 0 row by row, but a column-major one, or one with
n = 1, or a vector, pairwise (`pairwise_sum`); the kernels sum each figure as numpy does for the layout it has
there. Ties between ranks go to the lower rank (`top3`, as a stable sort would), and a rank's pieces are ordered by a
stable sort: numpy's `argpartition` and default sort leave ties to the SIMD path it picks on the CPU at hand. tests/sharding/test_search_kernels.py checks the kernels against the numpy code.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

__all__ = ["summary", "top3", "try_rank", "place_best", "place_all", "place_groups", "put_blocks", "place_cut", "host_scores", "place_scores", "move_scores", "swap_scores", "pairwise_sum", "row_sums"]

_TOL = 1e-12
_ROOM = 1 + 1e-12  # as `Bins.fits`: a tier fits up to its capacity × (1 + 1e-12)


@njit(cache=True)
def pairwise_sum(x: np.ndarray) -> float:
    """numpy's `add.reduce` of a one-dimensional float64 array (its pairwise sum; n ≤ 128 here)."""
    n = x.shape[0]
    if n < 8:
        res = 0.0
        for i in range(n):
            res += x[i]
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]  # 8 accumulators, no array
    i = 8
    while i < n - n % 8:
        r0 += x[i]
        r1 += x[i + 1]
        r2 += x[i + 2]
        r3 += x[i + 3]
        r4 += x[i + 4]
        r5 += x[i + 5]
        r6 += x[i + 6]
        r7 += x[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += x[i]
        i += 1
    return res


@njit(cache=True)
def row_sums(x: np.ndarray) -> np.ndarray:
    """`pairwise_sum` of each row of a two-dimensional array (many shard vectors at once)."""
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = pairwise_sum(x[i])
    return out


@njit(cache=True, inline="always")
def _sq(weight: np.ndarray, col: np.ndarray, delta: np.ndarray, k: int) -> float:
    """Term k of `_ssq`: numpy's `weight * delta * (2 * col + delta)`, element k."""
    return (weight[k] * delta[k]) * (2.0 * col[k] + delta[k])


@njit(cache=True)
def summary(v: np.ndarray, s0: float, s1: float) -> np.ndarray:
    """`Resources.summary`: (ours, TorchRec) scaled seconds of a vector, numpy's sum."""
    out = np.empty(2)
    out[0] = s0 * pairwise_sum(v[:-1])
    out[1] = s1 * v[-1]
    return out


@njit(cache=True, inline="always")
def _max(x: float, y: float) -> float:
    return x if x >= y else y


@njit(cache=True)
def _rest(topi: np.ndarray, topv: np.ndarray, k: int, a: int, b: int) -> float:
    """Row k's max over ranks other than a and b (`Loads._rest`)."""
    a0 = topi[k, 0] == a
    a01 = a0 or topi[k, 1] == a
    first = topi[k, 1] if a0 else topi[k, 0]
    v0 = topv[k, 1] if a0 else topv[k, 0]
    v1 = topv[k, 2] if a01 else topv[k, 1]
    return v1 if b == first else v0


@njit(cache=True)
def _score(new: np.ndarray, w0: float, w1: float, const: float, pairwise: bool) -> tuple[float, float]:
    """(J, secondary) of one column of row maxima (`Resources.score`)."""
    K = new.shape[0]
    if pairwise:
        tot = pairwise_sum(new[:K - 1])
    else:
        tot = 0.0
        for k in range(K - 1):
            tot += new[k]
    ours = w0 * (const + tot)
    tr = w1 * new[K - 1]
    return _max(ours, tr), ours + tr


@njit(cache=True)
def _ssq(weight: np.ndarray, col: np.ndarray, delta: np.ndarray, pairwise: bool) -> float:
    """Change of the weighted Σ L² of one column (`Loads._ssq`): its terms summed as numpy sums them (pairwise, or
    row by row), each term computed where the sum reads it (no temporary arrays)."""
    n = weight.shape[0]
    if pairwise and n >= 8:
        r0, r1, r2, r3 = _sq(weight, col, delta, 0), _sq(weight, col, delta, 1), _sq(weight, col, delta, 2), \
            _sq(weight, col, delta, 3)
        r4, r5, r6, r7 = _sq(weight, col, delta, 4), _sq(weight, col, delta, 5), _sq(weight, col, delta, 6), \
            _sq(weight, col, delta, 7)
        i = 8
        while i < n - n % 8:
            r0 += _sq(weight, col, delta, i)
            r1 += _sq(weight, col, delta, i + 1)
            r2 += _sq(weight, col, delta, i + 2)
            r3 += _sq(weight, col, delta, i + 3)
            r4 += _sq(weight, col, delta, i + 4)
            r5 += _sq(weight, col, delta, i + 5)
            r6 += _sq(weight, col, delta, i + 6)
            r7 += _sq(weight, col, delta, i + 7)
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += _sq(weight, col, delta, i)
            i += 1
        return res
    tot = 0.0
    for k in range(n):
        tot += _sq(weight, col, delta, k)
    return tot


@njit(cache=True)
def place_scores(L, count, hold, weight, w0, w1, const, g, vec):  # noqa: ANN001, ANN201
    """(J, secondary, Δ Σ L²) after adding `vec` (group g) to each rank, as `Loads.place_scores`."""
    K, W = L.shape
    one = W == 1  # numpy reduces a (K, 1) array pairwise
    top = np.empty(K)
    for k in range(K):
        top[k] = L[k].max()
    J, S, Q = np.empty(W), np.empty(W), np.empty(W)
    new, add = np.empty(K), np.empty(K)
    for b in range(W):
        h = 1.0 if count[g, b] == 0 else 0.0
        for k in range(K):
            add[k] = vec[k] + hold[g, k] * h
            new[k] = _max(top[k], L[k, b] + add[k])
        J[b], S[b] = _score(new, w0, w1, const, one)
        Q[b] = _ssq(weight, L[:, b], add, one)
    return J, S, Q


@njit(cache=True)
def place_best(L, count, hold, weight, w0, w1, const, g, vec, ok) -> int:  # noqa: ANN001
    """The rank `best_of(*Loads.place_scores(g, vec), ok)` picks: −1 if none is ok."""
    J, S, Q = place_scores(L, count, hold, weight, w0, w1, const, g, vec)
    return _best_of(J, S, Q, ok)


@njit(cache=True)
def place_cut(L, count, hold, weight, w0, w1, const, first_const, after_const, g, vec, mem, used, cap, k,  # noqa: ANN001, ANN201
              j0):
    """`pack._try_split`'s trial of k column blocks `vec` (group g), on copies of the loads: skipped (no ranks) if
    the first block on its best rank, with the step's fixed cost `first_const`, already has J > j0; else the
    blocks placed greedily one per distinct rank (`_place_new`) and the objective with fixed cost `after_const`:
    (ranks, J, secondary); no ranks if they do not fit."""
    W = L.shape[1]
    none = np.empty(0, dtype=np.int64)
    J, _, _ = place_scores(L, count, hold, weight, w0, w1, first_const, g, vec)
    lo, found = np.inf, False
    for b in range(W):
        if _fits(used, cap, mem, b):
            found = True
            lo = min(lo, J[b])
    if not found or lo > j0 * (1 + _TOL) + _TOL:
        return none, 0.0, 0.0
    L, count, used = L.copy(), count.copy(), used.copy()
    ranks = np.empty(k, dtype=np.int64)
    ok = np.empty(W, dtype=np.bool_)
    for i in range(k):
        for b in range(W):
            ok[b] = _fits(used, cap, mem, b)
        for x in range(i):
            ok[ranks[x]] = False
        J, S, Q = place_scores(L, count, hold, weight, w0, w1, const, g, vec)
        r = _best_of(J, S, Q, ok)
        if r < 0:
            return none, 0.0, 0.0
        _put(L, count, hold, used, mem, r, g, vec)
        ranks[i] = r
    top = np.empty(L.shape[0])
    for x in range(L.shape[0]):
        top[x] = L[x].max()
    j, s = _score(top, w0, w1, after_const, True)
    return ranks, j, s


@njit(cache=True)
def place_all(L, count, hold, weight, w0, w1, const, order, groups, tables, vecs, mems, used, cap, ranks,  # noqa: ANN001
              least_loaded) -> int:
    """`pack.Builder.place`'s greedy loop: pieces `order` (piece i: group groups[i], table tables[i], vector
    vecs[i], bytes per tier mems[i]) each onto the rank `place_best` picks (`least_loaded`: the first with the least
    TorchRec perf, the last row of L) among those with room and without a piece of its table, then `_put` there;
    ranks[i] gets the rank. Returns the first piece that fits nowhere (the
    loads then hold the pieces placed before it), or −1."""
    W = L.shape[1]
    prev = np.full(ranks.shape[0], -1, dtype=np.int64)  # the piece of the same table placed before this one
    last = np.full(tables.max() + 1 if tables.shape[0] else 0, -1, dtype=np.int64)
    ok = np.empty(W, dtype=np.bool_)
    for i in order:
        for b in range(W):
            ok[b] = _fits(used, cap, mems[i], b)
        x = last[tables[i]]
        while x >= 0:
            ok[ranks[x]] = False
            x = prev[x]
        if least_loaded:  # `np.argmin` of the last row among ok ranks: the first least
            r, lo = -1, np.inf
            for b in range(W):
                if ok[b] and (r < 0 or L[-1, b] < lo):
                    r, lo = b, L[-1, b]
        else:
            r = place_best(L, count, hold, weight, w0, w1, const, groups[i], vecs[i], ok)
        if r < 0:
            return i
        _put(L, count, hold, used, mems[i], r, groups[i], vecs[i])
        ranks[i] = r
        prev[i] = last[tables[i]]
        last[tables[i]] = i
    return -1


@njit(cache=True)
def host_scores(L, count, hold, w0, w1, const, g, vecs, mems, used, cap):  # noqa: ANN001, ANN201
    """(fits, J, secondary) per host after putting vecs[i] (bytes per tier mems[i]) of group g on each host's i-th
    rank, as `Loads.host_scores_reference`."""
    K, W = L.shape
    h = vecs.shape[0]
    n = W // h
    top = np.empty(K)
    for k in range(K):
        top[k] = L[k].max()
    ok = np.ones(n, dtype=np.bool_)
    J, S = np.empty(n), np.empty(n)
    new = np.empty(K)
    for x in range(n):
        for i in range(h):
            r = x * h + i
            for t in range(used.shape[0]):
                if mems[i, t] > 0 and not used[t, r] + mems[i, t] <= cap[t] * _ROOM:
                    ok[x] = False
        for k in range(K):
            m = -np.inf
            for i in range(h):
                r = x * h + i
                v = (L[k, r] + hold[g, k] * (1.0 if count[g, r] == 0 else 0.0)) + vecs[i, k]
                m = v if i == 0 else (m if m >= v else v)  # numpy's max over the host's ranks
            new[k] = _max(top[k], m)
        J[x], S[x] = _score(new, w0, w1, const, n == 1)
    return ok, J, S


@njit(cache=True)
def put_blocks(L, count, hold, used, g, first, n, replica, vecs, mems) -> None:  # noqa: ANN001
    """Block i: vecs[i] (group g[i], bytes mems[i]) on each of ranks first[i] .. first[i] + n[i] − 1, in order:
    `Loads.put_all` where replica[i] (L += vec + hold × no-holder-yet), else `Loads.put_ranks` (L += hold ×
    no-holder-yet, then L += vec)."""
    for i in range(first.shape[0]):
        gi = g[i]
        for r in range(first[i], first[i] + n[i]):
            c = 1.0 if count[gi, r] == 0 else 0.0
            if replica[i]:
                for k in range(L.shape[0]):
                    L[k, r] += vecs[i, k] + hold[gi, k] * c
            else:
                for k in range(L.shape[0]):
                    L[k, r] += hold[gi, k] * c
                for k in range(L.shape[0]):
                    L[k, r] += vecs[i, k]
            count[gi, r] += 1
            for t in range(used.shape[0]):
                used[t, r] += mems[i, t]


@njit(cache=True)
def place_groups(L, count, hold, w0, w1, const, g, vecs, mems, used, cap, hosts) -> int:  # noqa: ANN001
    """`pack.Builder.pack`'s table-row-wise loop: group i (vecs[i], mems[i]: its h shards) onto the host with the
    least (J, secondary) by `host_scores` among those with room, the first on ties (`pack._lexmin`), shard j on the
    host's j-th rank (`_put`); hosts[i] gets the host. Returns the first group that fits on no host, or −1."""
    h = vecs.shape[1]
    for i in range(vecs.shape[0]):
        ok, J, S = host_scores(L, count, hold, w0, w1, const, g, vecs[i], mems[i], used, cap)
        best, jm, sm = -1, np.inf, np.inf
        for x in range(ok.shape[0]):  # the least J among ok hosts
            if ok[x] and (best < 0 or J[x] < jm):
                best, jm = x, J[x]
        if best < 0:
            return i
        best = -1
        for x in range(ok.shape[0]):  # then the least secondary among those at that J
            if ok[x] and J[x] == jm and (best < 0 or S[x] < sm):
                best, sm = x, S[x]
        for j in range(h):
            _put(L, count, hold, used, mems[i, j], best * h + j, g, vecs[i, j])
        hosts[i] = best
    return -1


@njit(cache=True)
def move_scores(L, count, hold, weight, w0, w1, const, topi, topv, a, g, vec):  # noqa: ANN001, ANN201
    """(J, secondary, Δ Σ L²) after moving `vec` (group g) from rank a to each rank, as `Loads.move_scores`."""
    K, W = L.shape
    c = 1.0 if count[g, a] == 1 else 0.0
    rem = vec + hold[g] * c
    la = L[:, a] - rem
    q_a = _ssq(weight, L[:, a], -rem, True)
    J, S, Q = np.empty(W), np.empty(W), np.empty(W)
    new, add = np.empty(K), np.empty(K)
    for b in range(W):
        h = 1.0 if count[g, b] == 0 else 0.0
        for k in range(K):
            add[k] = vec[k] + hold[g, k] * h
            new[k] = _max(_max(_rest(topi, topv, k, a, b), la[k]), L[k, b] + add[k])
        J[b], S[b] = _score(new, w0, w1, const, False)
        Q[b] = _ssq(weight, L[:, b], add, False) + q_a
    return J, S, Q


@njit(cache=True)
def swap_scores(L, count, hold, weight, w0, w1, const, topi, topv, a, gi, vi, bs, gj, vj):  # noqa: ANN001, ANN201
    """Scores of swapping piece i (rank a) with each piece j (rank bs[j]), as `Loads.swap_scores`."""
    K = L.shape[0]
    n = bs.shape[0]
    one = n == 1  # numpy reduces a (K, 1) array pairwise; rank a's Σ L² terms are column-major there: pairwise too
    J, S, Q = np.empty(n), np.empty(n), np.empty(n)
    new, da, db = np.empty(K), np.empty(K), np.empty(K)
    for j in range(n):
        b, g = bs[j], gj[j]
        d = 1.0 if g != gi else 0.0
        ca0 = 1.0 if count[g, a] == 0 else 0.0
        ca1 = 1.0 if count[gi, a] == 1 else 0.0
        cb0 = 1.0 if count[gi, b] == 0 else 0.0
        cb1 = 1.0 if count[g, b] == 1 else 0.0
        for k in range(K):
            da[k] = (vj[j, k] - vi[k]) + d * (hold[g, k] * ca0 - hold[gi, k] * ca1)
            db[k] = (vi[k] - vj[j, k]) + d * (hold[gi, k] * cb0 - hold[g, k] * cb1)
            new[k] = _max(_max(_rest(topi, topv, k, a, b), L[k, a] + da[k]), L[k, b] + db[k])
        J[j], S[j] = _score(new, w0, w1, const, one)
        Q[j] = _ssq(weight, L[:, a], da, True) + _ssq(weight, L[:, b], db, one)
    return J, S, Q


@njit(cache=True)
def _best_of(j: np.ndarray, s: np.ndarray, q: np.ndarray, ok: np.ndarray) -> int:
    """`search.best_of`."""
    jm, found = np.inf, False
    for i in range(j.shape[0]):
        if ok[i]:
            found = True
            jm = min(jm, j[i])
    if not found:
        return -1
    sm = np.inf
    for i in range(j.shape[0]):
        if ok[i] and j[i] <= jm * (1 + _TOL) + _TOL:
            sm = min(sm, s[i])
    best, qm = -1, np.inf
    for i in range(j.shape[0]):
        if ok[i] and j[i] <= jm * (1 + _TOL) + _TOL and s[i] <= sm * (1 + _TOL) + _TOL and (best < 0 or q[i] < qm):
            best, qm = i, q[i]
    return best


def better(j: float, s: float, q: float, j0: float, s0: float) -> bool:
    """(j, s) beats (j0, s0) beyond rounding, or ties and lowers Σ L² (q < 0): the search's acceptance test, one
    definition for Python (`search`, `pack`) and the kernels (`_better`)."""
    if j < j0 * (1 - _TOL) - _TOL:
        return True
    if j > j0 * (1 + _TOL) + _TOL:
        return False
    if s < s0 * (1 - _TOL) - _TOL:
        return True
    return s <= s0 * (1 + _TOL) + _TOL and q < -_TOL * max(abs(j0), 1e-30) ** 2


_better = njit(cache=True)(better)


@njit(cache=True)
def _take(L, count, hold, used, mem, r, g, vec) -> None:  # noqa: ANN001
    """`Loads.take`."""
    count[g, r] -= 1
    if count[g, r] == 0:
        L[:, r] -= hold[g]
    L[:, r] -= vec
    for t in range(used.shape[0]):
        used[t, r] += -mem[t]


@njit(cache=True)
def _put(L, count, hold, used, mem, r, g, vec) -> None:  # noqa: ANN001
    """`Loads.put`."""
    if count[g, r] == 0:
        L[:, r] += hold[g]
    count[g, r] += 1
    L[:, r] += vec
    for t in range(used.shape[0]):
        used[t, r] += mem[t]


@njit(cache=True)
def _fits(used, cap, mem, r) -> bool:  # noqa: ANN001
    """`Bins.fits_rank`."""
    for t in range(used.shape[0]):
        if mem[t] > 0 and not used[t, r] + mem[t] <= cap[t] * _ROOM:
            return False
    return True


@njit(cache=True)
def try_rank(L, count, hold, weight, w0, w1, const, topi, topv, a, order, ranks, vecs, groups, tables,  # noqa: ANN001
             multi, mems, used, cap, j0, s0) -> bool:
    """`_improve_move` then `_improve_swap` for hot rank a and its pieces `order` (largest first): applies the
    first improving move or swap to L, count, used and ranks and returns True, or returns False."""
    K, W = L.shape
    P = ranks.shape[0]
    for i in order:
        ok = np.empty(W, dtype=np.bool_)
        for b in range(W):
            ok[b] = _fits(used, cap, mems[i], b)
        ok[a] = False
        if multi[tables[i]]:
            for o in range(P):
                if tables[o] == tables[i]:
                    ok[ranks[o]] = False
        J, S, Q = move_scores(L, count, hold, weight, w0, w1, const, topi, topv, a, groups[i], vecs[i])
        b = _best_of(J, S, Q, ok)
        if b >= 0 and _better(J[b], S[b], Q[b], j0, s0):
            _take(L, count, hold, used, mems[i], a, groups[i], vecs[i])
            _put(L, count, hold, used, mems[i], b, groups[i], vecs[i])
            ranks[i] = b
            return True
    load = np.zeros(W)
    for k in range(K):
        for r in range(W):
            load[r] += L[k, r] * weight[k]
    cold = np.zeros(W, dtype=np.bool_)
    cold[np.argsort(load, kind="mergesort")[:max(2, W // 4)]] = True
    for i in order:
        n = 0
        others = np.empty(P, dtype=np.int64)
        for o in range(P):
            if ranks[o] != a and tables[o] != tables[i] and cold[ranks[o]]:
                others[n] = o
                n += 1
        if n == 0:
            continue
        others = others[:n]
        J, S, Q = swap_scores(L, count, hold, weight, w0, w1, const, topi, topv, a, groups[i], vecs[i],
                              ranks[others], groups[others], vecs[others])
        good = np.ones(n, dtype=np.bool_)
        for _ in range(8):
            k = _best_of(J, S, Q, good)
            if k < 0 or not _better(J[k], S[k], Q[k], j0, s0):
                break
            good[k] = False
            o = others[k]
            b = ranks[o]
            clash = False
            for x in range(P):
                if (multi[tables[i]] and tables[x] == tables[i] and x != i and ranks[x] == b) or \
                        (multi[tables[o]] and tables[x] == tables[o] and x != o and ranks[x] == a):
                    clash = True
            if clash:
                continue
            _take(L, count, hold, used, mems[i], a, groups[i], vecs[i])
            _take(L, count, hold, used, mems[o], b, groups[o], vecs[o])
            if _fits(used, cap, mems[i], b) and _fits(used, cap, mems[o], a):
                _put(L, count, hold, used, mems[i], b, groups[i], vecs[i])
                _put(L, count, hold, used, mems[o], a, groups[o], vecs[o])
                ranks[i], ranks[o] = b, a
                return True
            _put(L, count, hold, used, mems[i], a, groups[i], vecs[i])
            _put(L, count, hold, used, mems[o], b, groups[o], vecs[o])
    return False


@njit(cache=True)
def top3(L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of L, the ranks and loads of its three largest entries, largest first; among equal loads the lower
    rank first (as a stable sort), on every CPU. Rows with fewer than three ranks are padded with rank −1, load 0."""
    K, W = L.shape
    idx = np.full((K, 3), -1, dtype=np.int64)
    vals = np.zeros((K, 3))
    for k in range(K):
        n = 0
        for r in range(W):
            x = L[k, r]
            p = n
            while p > 0 and x > vals[k, p - 1]:  # strictly larger moves up: an earlier rank keeps its place on ties
                p -= 1
            if p < 3:
                for q in range(min(n, 2), p, -1):
                    idx[k, q], vals[k, q] = idx[k, q - 1], vals[k, q - 1]
                idx[k, p], vals[k, p] = r, x
                n = min(n + 1, 3)
    return idx, vals


@njit(cache=True)
def search(L, count, hold, weight, w0, w1, const, ranks, vecs, size, groups, tables, multi, mems, used, cap,  # noqa: ANN001
           max_iters, hot_ranks, try_pieces) -> int:
    """`search.local_search`'s loop: per iteration, the objective, the ranks holding some row's maximum (row
    order, each once) by decreasing weighted load (a stable sort: `list.sort`), and on the first `hot_ranks` of
    them their `try_pieces` largest pieces (by `size`, a stable sort as `np.argsort(kind="stable")`) tried by
    `try_rank` until one move or swap is applied. Returns the iterations used (`max_iters` if none was left)."""
    K, W = L.shape
    P = ranks.shape[0]
    tmp = np.empty(K)
    for n in range(max_iters):
        j0, s0 = _objective(L, w0, w1, const)
        topi, topv = top3(L)
        hot = np.empty(K, dtype=np.int64)
        key = np.empty(K)
        m = 0
        for k in range(K):  # `dict.fromkeys` of the rows' top ranks where the row's maximum is positive
            r = topi[k, 0]
            if topv[k, 0] > 0 and r >= 0:
                seen = False
                for x in range(m):
                    seen = seen or hot[x] == r
                if not seen:
                    for x in range(K):
                        tmp[x] = L[x, r] * weight[x]
                    v = -pairwise_sum(tmp)  # `-float((L[:, r] * weight).sum())`
                    p = m  # insertion: after every key ≤ v (stable)
                    while p > 0 and key[p - 1] > v:
                        hot[p], key[p] = hot[p - 1], key[p - 1]
                        p -= 1
                    hot[p], key[p] = r, v
                    m += 1
        moved = False
        for h in range(min(m, hot_ranks)):
            a = hot[h]
            on_a = np.empty(P, dtype=np.int64)
            c = 0
            for i in range(P):  # pieces on rank a, ascending; then by decreasing size, stable
                if ranks[i] == a:
                    p = c
                    while p > 0 and -size[on_a[p - 1]] > -size[i]:
                        on_a[p] = on_a[p - 1]
                        p -= 1
                    on_a[p] = i
                    c += 1
            if try_rank(L, count, hold, weight, w0, w1, const, topi, topv, a, on_a[:min(c, try_pieces)], ranks,
                        vecs, groups, tables, multi, mems, used, cap, j0, s0):
                moved = True
                break
        if not moved:
            return n
    return max_iters


@njit(cache=True)
def _objective(L: np.ndarray, w0: float, w1: float, const: float) -> tuple[float, float]:
    """`Loads.objective` of loads L with fixed cost `const`."""
    top = np.empty(L.shape[0])
    for k in range(L.shape[0]):
        top[k] = L[k].max()
    return _score(top, w0, w1, const, True)


# Compiled at import, as `sharding.anneal`'s kernel: loaded from numba's disk cache (written once per checkout, or
# to numba's user-wide cache where the checkout is read-only), so the first plan of a process does not wait.
_F, _F2, _I, _I2, _B = (numba.float64, numba.float64[:, ::1], numba.int64[::1], numba.int64[:, ::1],
                        numba.boolean[::1])
_LOADS = (_F2, _I2, _F2, numba.float64[::1], _F, _F, _F)  # L, count, hold, weight, scales, fixed cost
summary.compile((numba.float64[::1], _F, _F))
top3.compile((_F2,))
try_rank.compile((*_LOADS, _I2, _F2, numba.int64, _I, _I, _F2, _I, _I, _B, _F2, _F2, numba.float64[::1], _F, _F))
place_best.compile((*_LOADS, numba.int64, numba.float64[::1], _B))
host_scores.compile((_F2, _I2, _F2, _F, _F, _F, numba.int64, _F2, _F2, _F2, numba.float64[::1]))
search.compile((*_LOADS, _I, _F2, numba.float64[::1], _I, _I, _B, _F2, _F2, numba.float64[::1], numba.int64,
                numba.int64, numba.int64))
place_cut.compile((*_LOADS, _F, _F, numba.int64, numba.float64[::1], numba.float64[::1], _F2, numba.float64[::1],
                   numba.int64, _F))
pairwise_sum.compile((numba.float64[::1],))  # these four were compiled at their first call: 0.23 s of the first
place_all.compile((*_LOADS, _I, _I, _I, _F2, _F2, _F2, numba.float64[::1], _I, numba.boolean))  # plan (f94, issue 16)
put_blocks.compile((_F2, _I2, _F2, _F2, _I, _I, _I, _B, _F2, _F2))
place_groups.compile((_F2, _I2, _F2, _F, _F, _F, numba.int64, numba.float64[:, :, ::1], numba.float64[:, :, ::1], _F2,
                      numba.float64[::1], _I))
row_sums.compile((numba.float64[:, :],))  # the batched option pricing's shard sums (pack.Builder._price_all)
