"""Per-rank sums of a plan's shard terms, added by one compiled call instead of a numpy add per shard shape.

The cost models rate a plan by adding, for each table in the plan's order and each of its shard shapes, the
shape's terms (work, collective seconds, bytes, …) to the ranks holding that shape. `RankSums` collects those
additions in that order and `add_terms` performs them: every entry of the result receives the same additions in
the same order as the former one-add-per-shape loop (`np.add.at` where a rank repeats), so ratings are bitwise
the same (tests/sharding/test_rank_sums.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from operator import is_, itemgetter
from typing import TYPE_CHECKING

import numba
import numpy as np
from numba import njit

if TYPE_CHECKING:
    from sharding.plan import ShardingPlan

__all__ = ["RankSums", "add_terms"]


@njit(cache=True)
def add_terms(out: np.ndarray, rows: np.ndarray, vals: np.ndarray, vptr: np.ndarray, ranks: np.ndarray,
              rptr: np.ndarray) -> None:
    """For each shape g in order: out[rows[j], r] += vals[j] for its terms j in vptr[g]:vptr[g+1] and its ranks
    r in ranks[rptr[g]:rptr[g+1]] (a rank listed twice gets the term twice)."""
    for g in range(vptr.shape[0] - 1):
        for j in range(vptr[g], vptr[g + 1]):
            q, x = rows[j], vals[j]
            for i in range(rptr[g], rptr[g + 1]):
                out[q, ranks[i]] += x


_I1 = numba.int64[::1]
add_terms.compile((numba.float64[:, ::1], _I1, numba.float64[::1], _I1, _I1, _I1))  # at import (from numba's disk
# cache), for the arrays `RankSums.total` passes, so the first rating of a process does not wait


class RankSums:
    """The additions of one rating, in order: `groups` holds one (rows of the result, values, ranks) per shard
    shape, appended by the caller; `total` performs them all on a (rows × ranks) array of zeros."""

    def __init__(self) -> None:
        self.groups: list[tuple[Sequence[int], Sequence[float], Sequence[int]]] = []

    def total(self, n_rows: int, world: int, plan: ShardingPlan | None = None) -> np.ndarray:
        """`plan`: the plan whose shard shapes (`TablePlan.alike`, in table order) the groups are, so that the
        ranks' arrays are shared with the next rating of the same plan (`_ranks`)."""
        g, n = self.groups, len(self.groups)
        at, vals = (list(map(itemgetter(i), g)) for i in range(2))
        out = np.zeros((n_rows, world))
        add_terms(out, np.fromiter(chain.from_iterable(at), np.int64), np.fromiter(chain.from_iterable(vals), np.float64),
                  _offsets(at, n), *_ranks(g, n, plan))
        return out


_LAST: list = [(None, (), None)]  # (the plan last rated, its table plans, its ranks' arrays): `_ranks`, read and
# replaced as one tuple (threads rating plans at once at worst miss it)


def _ranks(groups: list[tuple[Sequence[int], Sequence[float], Sequence[int]]], n: int,
           plan: ShardingPlan | None) -> tuple[np.ndarray, np.ndarray]:
    """The groups' ranks concatenated and their offsets. Both models rate a plan in turn (`plan_cost` of ours,
    then TorchRec's) over the same shapes in the same order, and on 256 ranks the ranks are most of the entries
    (random:1000:1/256: 524k ranks against 14k shapes over 12 candidates; issue 16): kept for the last plan and
    reused while it holds the same table plans (the same objects: immutable, and kept alive here, so an identity
    check suffices)."""
    last, tps, got = _LAST[0]
    if plan is not None and last is plan and len(tps) == len(plan.tables) \
            and all(map(is_, tps, plan.tables.values())) and len(got[1]) == n + 1:
        return got
    where = list(map(itemgetter(2), groups))
    got = np.fromiter(chain.from_iterable(where), np.int64), _offsets(where, n)
    if plan is not None:
        _LAST[0] = (plan, tuple(plan.tables.values()), got)
    return got


def _offsets(seqs: list[Sequence], n: int) -> np.ndarray:
    """Where each of the n sequences starts in their concatenation, and its length (n + 1 offsets)."""
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, seqs), np.int64, n), out=out[1:])
    return out
