"""Per-rank sums of a plan's shard terms, added by one compiled call instead of a numpy add per shard shape.

The cost models rate a plan by adding, for each table in the plan's order and each of its shard shapes, the
shape's terms (work, collective seconds, bytes, …) to the ranks holding that shape. `RankSums` collects those
additions in that order and `add_terms` performs them: every entry of the result receives the same additions in
the same order as the former one-add-per-shape loop (`np.add.at` where a rank repeats), so ratings are bitwise
the same (tests/sharding/test_rank_sums.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat

import numba
import numpy as np
from numba import njit

__all__ = ["RankSums", "add_terms", "add_packed"]


@njit(cache=True)
def add_terms(out: np.ndarray, rows: np.ndarray, vals: np.ndarray, vptr: np.ndarray, ranks: np.ndarray,
              rptr: np.ndarray, lo: np.ndarray, span: np.ndarray) -> None:
    """For each shape g in order: out[rows[j], r] += vals[j] for its terms j in vptr[g]:vptr[g+1] and its ranks
    r in ranks[rptr[g]:rptr[g+1]] (a rank listed twice gets the term twice), then in lo[g]:lo[g]+span[g] (the
    ranks of a shape listed as a run of consecutive ranks, `RankSums.total`: one of the two is empty)."""
    for g in range(vptr.shape[0] - 1):
        for j in range(vptr[g], vptr[g + 1]):
            q, x = rows[j], vals[j]
            for i in range(rptr[g], rptr[g + 1]):
                out[q, ranks[i]] += x
            for r in range(lo[g], lo[g] + span[g]):
                out[q, r] += x


@njit(cache=True)
def add_packed(out: np.ndarray, ints: np.ndarray, vals: np.ndarray, n: int, n_at: int, n_listed: int) -> None:
    """`add_terms` with its integer arrays packed in one (`RankSums.total`): `ints` holds the shapes' rows of the
    result (n_at, in order), their listed ranks (n_listed), then per shape its rows count, its listed ranks
    count, its run's first rank and its run's length (n each); the same additions in the same order."""
    base = n_at + n_listed
    a, b = 0, n_at
    for g in range(n):
        nr, nl, lo, span = ints[base + g], ints[base + n + g], ints[base + 2 * n + g], ints[base + 3 * n + g]
        for j in range(a, a + nr):
            q, x = ints[j], vals[j]
            for i in range(b, b + nl):
                out[q, ints[i]] += x
            for r in range(lo, lo + span):
                out[q, r] += x
        a += nr
        b += nl


_I1 = numba.int64[::1]
add_terms.compile((numba.float64[:, ::1], _I1, numba.float64[::1], _I1, _I1, _I1, _I1, _I1))  # at import (from
# numba's disk cache), so the first rating of a process does not wait (`add_terms`: the reference of `add_packed`)
add_packed.compile((numba.float64[:, ::1], _I1, numba.float64[::1], numba.int64, numba.int64, numba.int64))
SPAN_MIN = 32  # shapes on at least this many ranks are checked for a run of consecutive ranks (`RankSums.total`)


class RankSums:
    """The additions of one rating, in order: `groups` holds one (rows of the result, values, ranks) per shard
    shape, appended by the caller; `total` performs them all on a (rows × ranks) array of zeros."""

    def __init__(self) -> None:
        self.groups: list[tuple[Sequence[int], Sequence[float], Sequence[int]]] = []

    def total(self, n_rows: int, world: int) -> np.ndarray:
        """The sums. A shape whose ranks are a list of consecutive ranks in order (data-parallel replicas and
        row-wise blocks over all ranks: most of r1000's 10^5 ranks per rating) is passed as (first, count) instead
        of its ranks, which numpy then need not read one by one; the kernel adds the same terms to the same
        entries in the same order. The integers go in one array (`add_packed`): a small plan's rating was mostly
        the former eight arrays' numpy calls (f88: ~35 µs of a rating's ~40 by TorchRec's model)."""
        g, n = self.groups, len(self.groups)
        out = np.zeros((n_rows, world))
        if not n:
            return out
        at, vals, where = zip(*g, strict=True)
        if world < SPAN_MIN:  # no list of SPAN_MIN ranks is a run of ranks below `world`
            listed, lo, span = where, repeat(0, n), repeat(0, n)
        else:
            every = list(range(world))  # x == every[x[0]:x[0] + k], k = len(x): x is k consecutive ranks from x[0]
            span = [k if k >= SPAN_MIN and x == every[x[0]:x[0] + k] else 0
                    for x, k in zip(where, map(len, where), strict=True)]
            listed = [() if k else x for x, k in zip(where, span, strict=True)]
            lo = [x[0] if k else 0 for x, k in zip(where, span, strict=True)]
        flat = np.fromiter(chain.from_iterable(vals), np.float64)
        ints = np.fromiter(chain(chain.from_iterable(at), chain.from_iterable(listed), map(len, at), map(len, listed),
                                 lo, span), np.int64)
        add_packed(out, ints, flat, n, len(flat), len(ints) - len(flat) - 4 * n)
        return out
