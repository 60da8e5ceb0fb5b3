"""Lower bounds on the cost (slowest rank) of any plan our options can express, for a workload and topology.

Per-rank cost is a sum of shard costs plus non-negative latency, so the slowest rank costs at least
  (a) the average load: Σ_j (least total work of table j over TW, DP, CW(k), TWRW, RW, all in the fast tier)
      + the least extra time of the rows that cannot fit the fast tier, all over W ranks; and
  (b) the largest piece: max_j (over the same options, the least cost of the table's largest shard);
plus, with more than one rank, the latency of the collective calls the slowest rank must take part in.
The tier term is a fractional knapsack: the fast tier of all ranks holds at most its usable bytes, weights beyond
it (optimizer state may live in the slow tier for free) must be read from the next tier. Each table's penalty,
non-decreasing in the share demoted, is replaced by the convex minorant of a step function below it (valid for
measured LRU curves, which need not be convex); taking the cheapest slopes first is then optimal.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedding.spec import DTYPE_BYTES
from sharding.cost import CostModel
from sharding.layouts import column_splits, row_sizes
from sharding.plan import ShardingType
from sharding.trec_cost import TorchRecCostModel

__all__ = ["LowerBound", "lower_bound"]

TW, CW, RW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.ROW_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)
_GRID = np.linspace(0.0, 1.0, 41)  # demoted share of a table's rows


@dataclass(frozen=True)
class LowerBound:
    average: float  # (a) without the tier term
    tier_penalty: float  # added to Σ work by rows that cannot be in the fast tier
    largest_piece: float  # (b)
    world_size: int
    latency: float = 0.0  # one collective's latency per pass: the slowest rank holds a shard, so it takes part

    @property
    def value(self) -> float:
        return max(self.average + self.tier_penalty / self.world_size, self.largest_piece) + self.latency

    def to_dict(self) -> dict[str, float]:
        return {"lower_bound_s": self.value, "average_s": self.average, "tier_penalty_s": self.tier_penalty,
                "largest_piece_s": self.largest_piece, "latency_s": self.latency}


def _table_terms(cost: CostModel | TorchRecCostModel, name: str, allow_dp: bool = True) -> tuple[float, float]:
    """(least total work, least largest-shard cost) of a table, all in the fast tier."""
    t, topo = cost.tables[name], cost.topology
    fast, w, h = topo.fast.name, topo.world_size, min(topo.ranks_per_host, topo.world_size)
    tw = cost.shard_cost(t, TW, t.rows, t.dim, fast).total
    work, piece = tw, tw
    if w > 1 and allow_dp:
        dp = cost.shard_cost(t, DP, t.rows, t.dim, fast).total
        work, piece = min(work, dp * w), min(piece, dp)
    for k in [k for k in column_splits(t.dim) if k <= w]:
        c = cost.shard_cost(t, CW, t.rows, t.dim // k, fast).total
        work, piece = min(work, c * k), min(piece, c)
    for st, n in ((TWRW, h), (RW, w)):  # n = 1 too: TorchRec prices a lone RW shard below a TW one
        if n >= 1:
            cs = [(cost.shard_cost(t, st, r, t.dim, fast).total, k) for r, k in row_sizes(t.rows, n)]
            work, piece = min(work, sum(c * k for c, k in cs)), min(piece, max(c for c, _ in cs))
    return work, piece


def _hull_segments(xs: np.ndarray, ys: np.ndarray) -> list[tuple[float, float]]:
    """(width, slope) of the lower convex hull of points (xs, ys), xs ascending, slopes ascending."""
    hull: list[tuple[float, float]] = []
    for x, y in zip(xs, ys, strict=True):
        while len(hull) >= 2 and (hull[-1][1] - hull[-2][1]) * (x - hull[-2][0]) >= \
                (y - hull[-2][1]) * (hull[-1][0] - hull[-2][0]):
            hull.pop()
        hull.append((float(x), float(y)))
    return [(b[0] - a[0], (b[1] - a[1]) / (b[0] - a[0])) for a, b in zip(hull, hull[1:], strict=False)]


def _tier_penalty(cost: CostModel) -> float:
    """Least added time of the weights that cannot fit the fast tier (see the module docstring)."""
    topo, wl = cost.topology, cost.workload
    if len(topo.tiers) < 2:
        return 0.0
    fast, slow = topo.tiers[0], topo.tiers[1]
    excess = sum(t.bytes for t in wl.tables) - topo.usable(fast.name) * topo.world_size
    if excess <= 0:
        return 0.0
    segments: list[tuple[float, float]] = []
    bwd = 1 + (topo.bwd_compute_multiplier if wl.train else 0.0)
    for t in wl.tables:
        lookups = cost._traffic(t, TW, t.rows)[0]
        k = lookups * t.dim * DTYPE_BYTES[t.dtype] * (1 / slow.bandwidth - 1 / fast.bandwidth) * bwd
        pen = np.array([k * cost.miss_rate(t, 1 - x) for x in _GRID])  # non-decreasing in the demoted share
        # demoting more than x_i costs at least pen(x_i): the step function's convex minorant bounds the penalty
        # from below whether or not the miss curve is convex (measured LRU curves need not be)
        xs = np.concatenate([[0.0], _GRID[1:]]) * t.bytes
        ys = np.concatenate([[0.0], pen[:-1]])
        segments.extend(_hull_segments(xs, ys))
    total, need = 0.0, excess
    for width, slope in sorted(segments, key=lambda s: s[1]):
        take = min(width, need)
        total += max(slope, 0.0) * take
        need -= take
        if need <= 0:
            break
    return total


def lower_bound(cost: CostModel | TorchRecCostModel) -> LowerBound:
    """The bound for our cost model, or (given a `TorchRecCostModel`) for TorchRec's rating, which has neither
    latency nor a tier term (its slower kernels only add time, so all-fast work still bounds it).

    Latency: a plan with a data-parallel table puts a replica on every rank, so each rank takes part in at least
    its all-reduce (one call, training only); a plan without one has a slowest rank holding another shard, which
    takes part in at least the forward call (and the backward one when training). The bound is the smaller of
    the two cases, each with its own work terms."""
    topo, wl = cost.topology, cost.workload
    w = topo.world_size
    terms = [_table_terms(cost, t.name) for t in wl.tables]
    if isinstance(cost, TorchRecCostModel):
        return LowerBound(sum(a for a, _ in terms) / w, 0.0, max(b for _, b in terms), w, 0.0)
    penalty = _tier_penalty(cost)
    lat = topo.collective_link(w > topo.ranks_per_host).latency if w > 1 else 0.0
    with_dp = LowerBound(sum(a for a, _ in terms) / w, penalty, max(b for _, b in terms), w,
                         lat * (1 if wl.train else 0))
    no_dp_terms = [_table_terms(cost, t.name, allow_dp=False) for t in wl.tables]
    no_dp = LowerBound(sum(a for a, _ in no_dp_terms) / w, penalty, max(b for _, b in no_dp_terms), w,
                       lat * (2 if wl.train else 1))
    return min(with_dp, no_dp, key=lambda b: b.value)
