"""`trec_search.partition` and `trec_search._rating` in one compiled pass (numba) over the search space's arrays,
built once per search (`trec_search._Arrays`): the Python partitioner's per-shard objects (`_Dev.take`, the
`_Heap` comparisons) were most of the search's cost, and the search most of the small instances' planning (f41).

Same placements and the same floats as the Python version, by construction:
- its heap holds every rank whenever a shard is placed (ranks that do not fit are pushed back after each shard)
  and orders them strictly by (perf total, local rank, rank), so its top is the least rank by that key among
  those that fit: a scan over the ranks finds the same one;
- Python's sorts are stable; the insertion sorts here are too (descending by (hbm, ddr) for the options,
  ascending by summed perf for the hosts);
- every sum adds the same terms in the same order from 0 (Python 3.11's `sum` of floats adds left to right; a
  rank's total is f + b + fc + bc + p, as `Perf.total`); integer storage (TorchRec's bytes, < 2^53) is exact
  in float64.
tests/sharding/test_trec_search.py checks the search's best proposal, placement, rating and counts against the
Python path on seeded spaces.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

__all__ = ["partition_rate", "partition_rate_all", "option_terms", "greedy_sequence"]

UNIFORM, DEVICE, HOST = 0, 1, 2  # option kinds: RW/DP one shard per rank; TW/CW onto ranks; TWRW onto a host


@njit(cache=True)
def _total(dperf: np.ndarray, r: int) -> float:
    return dperf[r, 0] + dperf[r, 2] + dperf[r, 1] + dperf[r, 3] + dperf[r, 4]


@njit(cache=True)
def _take(r: int, s: int, hbm: np.ndarray, ddr: np.ndarray, dperf: np.ndarray, perf: np.ndarray,
          stor: np.ndarray) -> None:
    hbm[r] -= stor[s, 0]
    ddr[r] -= stor[s, 1]
    for j in range(5):
        dperf[r, j] += perf[s, j]


@njit(cache=True)
def _cohost(o: int, start: np.ndarray, sums: np.ndarray, perf: np.ndarray, stor: np.ndarray, hbm: np.ndarray,
            ddr: np.ndarray, dperf: np.ndarray, group: int, ranks: np.ndarray) -> bool:
    """`trec_search._cohost`: onto the first host, hosts by summed perf (stable), whose ranks hold its shards."""
    nh = hbm.shape[0] // group
    order = np.empty(nh, np.int64)
    key = np.empty(nh)
    for h in range(nh):
        s = 0.0
        for r in range(h * group, (h + 1) * group):
            s += _total(dperf, r)
        key[h] = s
        j = h  # stable insertion, ascending
        while j > 0 and key[order[j - 1]] > s:
            order[j] = order[j - 1]
            j -= 1
        order[j] = h
    n = start[o + 1] - start[o]
    for q in range(nh):
        h = order[q]
        sh, sd = 0.0, 0.0
        for r in range(h * group, (h + 1) * group):
            sh += hbm[r]
        for r in range(h * group, (h + 1) * group):
            sd += ddr[r]
        if not (sums[o, 0] <= sh and sums[o, 1] <= sd) or n != group:
            continue
        ok = True
        for i in range(n):
            s = start[o] + i
            r = h * group + i
            if not (stor[s, 0] <= hbm[r] and stor[s, 1] <= ddr[r]):
                ok = False
                break
        if not ok:
            continue
        for i in range(n):
            _take(h * group + i, start[o] + i, hbm, ddr, dperf, perf, stor)
            ranks[start[o] + i] = h * group + i
        return True
    return False


@njit(cache=True)
def partition_rate(prop: np.ndarray, kind: np.ndarray, start: np.ndarray, perf: np.ndarray, stor: np.ndarray,
                   tot: np.ndarray, sums: np.ndarray, cap: np.ndarray, local: int,
                   ranks: np.ndarray) -> tuple[bool, float]:
    """The proposal `prop` (option indices) placed as `trec_search.partition` places it: (False, 0) where that
    returns None, else (True, its `_rating`), each shard's rank written to `ranks` at its index in the space."""
    w = cap.shape[0]
    hbm, ddr = cap[:, 0].copy(), cap[:, 1].copy()
    dperf = np.zeros((w, 5))
    for o in prop:  # uniform first
        if kind[o] != UNIFORM:
            continue
        if start[o + 1] - start[o] != w:
            return False, 0.0
        for r in range(w):
            s = start[o] + r
            if not (stor[s, 0] <= hbm[r] and stor[s, 1] <= ddr[r]):
                return False, 0.0
            _take(r, s, hbm, ddr, dperf, perf, stor)
            ranks[s] = r
    rest = np.empty(prop.shape[0], np.int64)
    m = 0
    for o in prop:  # stable insertion, descending by (hbm, ddr) summed
        if kind[o] == UNIFORM:
            continue
        j = m
        while j > 0 and (sums[rest[j - 1], 0] < sums[o, 0] or
                         (sums[rest[j - 1], 0] == sums[o, 0] and sums[rest[j - 1], 1] < sums[o, 1])):
            rest[j] = rest[j - 1]
            j -= 1
        rest[j] = o
        m += 1
    group = max(1, local)
    for q in range(m):
        o = rest[q]
        if kind[o] == HOST:
            if not _cohost(o, start, sums, perf, stor, hbm, ddr, dperf, group, ranks):
                return False, 0.0
            continue
        for s in range(start[o], start[o + 1]):
            best, bt = -1, 0.0
            for r in range(w):
                if not (stor[s, 0] <= hbm[r] and stor[s, 1] <= ddr[r]):
                    continue
                t = _total(dperf, r)
                if best < 0 or t < bt or (t == bt and r % local < best % local):
                    best, bt = r, t  # ranks in ascending order: the first of equal keys is the least rank
            if best < 0:
                return False, 0.0
            _take(best, s, hbm, ddr, dperf, perf, stor)
            ranks[s] = best
    perfs = np.zeros(w)
    for o in prop:
        for s in range(start[o], start[o + 1]):
            perfs[ranks[s]] += tot[s]
    return True, perfs.max()


@njit(cache=True)
def option_terms(start: np.ndarray, tot: np.ndarray, stor: np.ndarray) -> np.ndarray:
    """Per option (row): its depth (largest shard total), breadth (shard totals summed), and its storage key of
    the greedy proposer: max hbm, summed hbm, max ddr, summed ddr; summed from 0 in shard order as Python sums."""
    n = start.shape[0] - 1
    out = np.empty((n, 6))
    for o in range(n):
        a = start[o]
        dep, br, mh, sh, md, sd = tot[a], 0.0, stor[a, 0], 0.0, stor[a, 1], 0.0
        for s in range(a, start[o + 1]):
            dep = max(dep, tot[s])
            br += tot[s]
            mh = max(mh, stor[s, 0])
            sh += stor[s, 0]
            md = max(md, stor[s, 1])
            sd += stor[s, 1]
        out[o, 0], out[o, 1], out[o, 2], out[o, 3], out[o, 4], out[o, 5] = dep, br, mh, sh, md, sd
    return out


@njit(cache=True)
def partition_rate_all(props: np.ndarray, kind: np.ndarray, start: np.ndarray, perf: np.ndarray, stor: np.ndarray,
                       tot: np.ndarray, sums: np.ndarray, cap: np.ndarray, local: int,
                       ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`partition_rate` of each row of `props` in turn (one call for a search's proposals, not one per proposal):
    per row whether it fits and its rating (0 where not); `ranks` holds the last row's placement."""
    n = props.shape[0]
    ok, out = np.zeros(n, np.bool_), np.zeros(n)
    for i in range(n):
        ok[i], out[i] = partition_rate(props[i], kind, start, perf, stor, tot, sums, cap, local, ranks)
    return ok, out


@njit(cache=True)
def _exceeds(keys: np.ndarray, o: int, best: np.ndarray) -> bool:
    """keys[o] > best as Python compares tuples of floats (the first unequal element decides)."""
    for j in range(keys.shape[1]):
        if keys[o, j] != best[j]:
            return keys[o, j] > best[j]
    return False


@njit(cache=True)
def greedy_sequence(tstart: np.ndarray, order: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """`trec_search._greedy`'s proposals as rows of option indices: table k's options are
    `order[tstart[k]:tstart[k + 1]]` (sorted by the proposer's key); after each proposal the first table, in
    table order, whose current option has the largest storage key (`keys`, above (0, 0, 0, 0)) and a next
    option moves to it; the sequence ends when none does."""
    nt = tstart.shape[0] - 1
    most = 1
    for k in range(nt):
        most += tstart[k + 1] - tstart[k] - 1
    out = np.empty((most, nt), np.int64)
    cur = np.zeros(nt, np.int64)
    best = np.zeros(keys.shape[1])
    m = 0
    while True:
        for k in range(nt):
            out[m, k] = order[tstart[k] + cur[k]]
        m += 1
        largest = -1
        best[:] = 0.0
        for k in range(nt):
            if cur[k] + 1 < tstart[k + 1] - tstart[k]:
                o = order[tstart[k] + cur[k]]
                if _exceeds(keys, o, best):
                    largest = k
                    best[:] = keys[o]
        if largest < 0:
            return out[:m]
        cur[largest] += 1


_I1, _F1, _F2 = numba.int64[::1], numba.float64[::1], numba.float64[:, ::1]
option_terms.compile((_I1, _F1, _F2))
partition_rate.compile((_I1, _I1, _I1, _F2, _F2, _F1, _F2, _F2, numba.int64, _I1))
partition_rate_all.compile((numba.int64[:, ::1], _I1, _I1, _F2, _F2, _F1, _F2, _F2, numba.int64, _I1))
greedy_sequence.compile((_I1, _I1, _F2))  # at import, from numba's
# disk cache once compiled (as `split_kernel`'s)
