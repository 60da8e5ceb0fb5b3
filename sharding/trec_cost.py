"""TorchRec's perf estimator, re-stated: the planner's per-shard Perf for the sharding types and kernels we plan,
computed without importing TorchRec so the optimizer can score every move on TorchRec's ground too.

It re-states TorchRec 1.8's default `EmbeddingPerfEstimator` (planner/estimator/estimator.py with the default
`EmbeddingPerfEstimatorConfig`: all coefficients 1, training evaluators, no stats-based prefetch), for pooled,
unweighted features, as `sharding.torchrec_adapter.torchrec_estimate` invokes it; `tests/sharding` checks the two
agree to 1e-9. With B = batch per rank, L = pooling, W = world, H = local world, d = shard dim, w = weight bytes:
  TW/CW  fwd = (8·B·L·W + B·L·W·max(d, 32)·w + B·W·d·w) · penalty(d) / bw_kernel;  comms B·W·d·w / bw_a2a each way
  RW     fwd = (8·B·L + B·L·d·w + B·W·d·w) / bw_kernel; comms B·W·d·w / bw (RS fwd, AG bwd) + 2.455× copy / bw_kernel
  TWRW   fwd = (8·B·L·W/H + B·L·W/H·d·w + B·W·d·w) / bw_kernel; RS within the host + A2A of B·(W/H)·d·w across
  DP     fwd = (8·B·L + B·L·d·w + B·d·w) / bw_dense; bwd comms all-reduce of the table + 9.22× table / bw_dense
  bwd compute = bwd_compute_multiplier × fwd; Perf.total = fwd + bwd compute + fwd + bwd comms (input dist not
  counted, as TorchRec's Perf.total omits it). penalty(d) = 1 (d ≥ 128), 1.15 (d ≥ 64), 1.75 below.
  bw_kernel: fused = HBM bw, dense = HBM/2, fused_uvm = slow-tier bw/10, fused_uvm_caching = (c·HBM + (1−c)·slow)/10.
  bw_a2a (and RS, AG) = intra-host bw when the collective stays in a host, inter-host bw otherwise; all-reduce
  = inter-host bw × H. Constants: TorchRec planner/constants.py (BATCHED_COPY_PERF_FACTOR 2.455,
  DP_ELEMENTWISE_KERNELS_PERF_FACTOR 9.22, HALF/QUARTER_BLOCK_PENALTY 1.15/1.75), TorchRec's own "empirical".
"""
from __future__ import annotations

import math

import numpy as np

from embedding.spec import DTYPE_BYTES, TableSpec
from sharding.cost import ShardCost, _shard_cost
from sharding.plan import ShardingPlan, ShardingType
from sharding.rank_sums import RankSums
from sharding.topology import Topology
from sharding.workload import PlanWorkload

__all__ = ["TorchRecCostModel", "trec_kernel"]

BATCHED_COPY_PERF_FACTOR = 2.455
DP_ELEMENTWISE_KERNELS_PERF_FACTOR = 9.22
FULL_BLOCK_EMB_DIM, HALF_BLOCK_PENALTY, QUARTER_BLOCK_PENALTY = 128, 1.15, 1.75
INDEX_BYTES = 8  # TorchRec's BIGINT_DTYPE
_ROW0 = (0,)  # `rank_loads`: its one row of sums
TW, CW, RW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.ROW_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)


def trec_kernel(st: ShardingType, tier: str, cache_fraction: float, topo: Topology) -> str:
    """TorchRec compute kernel of a shard (same rule as `torchrec_adapter.kernel_of`)."""
    if st == DP:
        return "dense"
    if tier == topo.fast.name:
        return "fused"
    return "fused_uvm_caching" if cache_fraction > 0 else "fused_uvm"


def _penalty(d: int) -> float:
    return 1.0 if d >= FULL_BLOCK_EMB_DIM else HALF_BLOCK_PENALTY if d >= 64 else QUARTER_BLOCK_PENALTY


class TorchRecCostModel:
    """TorchRec's per-shard perf (seconds) with the same `shard_cost` signature as `CostModel`."""

    def __init__(self, workload: PlanWorkload, topology: Topology) -> None:
        self.workload, self.topology = workload, topology
        self.tables = {t.name: t for t in workload.tables}
        self._memo: dict[tuple, ShardCost] = {}
        self._totals: dict[tuple, tuple[float]] = {}  # `rank_loads`: (Perf.total,) per `shard_cost` key

    def _kernel_bw(self, kernel: str, cache_fraction: float) -> float:
        topo = self.topology
        slow = topo.tiers[1] if len(topo.tiers) > 1 else topo.tiers[0]
        if topo.device == "cpu":  # TorchRec's cpu kernels read DDR: our tier 0 on a CPU rank
            return topo.fast.bandwidth * (0.5 if kernel == "dense" else 1.0)
        hbm, h2d = topo.fast.bandwidth, slow.bandwidth
        if kernel == "dense":
            return 0.5 * hbm
        if kernel == "fused":
            return hbm
        if kernel == "fused_uvm":
            return h2d / 10
        if kernel == "fused_uvm_caching":
            return (cache_fraction * hbm + (1 - cache_fraction) * h2d) / 10
        raise KeyError(kernel)

    def _bw(self, world: int, local: int) -> float:
        topo = self.topology
        return topo.intra_host.bandwidth if world <= local else topo.inter_host.bandwidth

    def shard_cost(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str,
                   cache_fraction: float = 0.0) -> ShardCost:
        key = (t.name, st, cols, tier, cache_fraction)  # TorchRec's perf ignores a shard's row count
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._shard_cost(t, st, cols, tier, cache_fraction)
        return got

    def price_many(self, keys: list[tuple[TableSpec, ShardingType, int, int, str, float]]) -> None:
        """Memoise `shard_cost` of many shards (t, type, rows, cols, tier, cache fraction) in the fast tier at
        once: numpy over the shards of one type, each term the same IEEE operations in the same order as
        `_shard_cost` (equal floats: tests/sharding); shards in other tiers are left to `shard_cost`."""
        topo, memo = self.topology, self._memo
        fast = topo.fast.name
        todo: dict[ShardingType, dict[tuple, tuple[TableSpec, int]]] = {}
        for t, st, _, cols, tier, cf in keys:
            key = (t.name, st, cols, tier, cf)
            if tier == fast and key not in memo:
                todo.setdefault(st, {})[key] = (t, cols)
        W, H = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        B, mult = float(self.workload.batch_size), topo.bwd_compute_multiplier
        for st, items in todo.items():
            ts = [x[0] for x in items.values()]
            d = np.array([float(x[1]) for x in items.values()])
            L = np.array([t.pooling.expected for t in ts])
            w = np.array([max(1.0, float(DTYPE_BYTES[t.dtype])) for t in ts])
            bi, bo = B * L, B * np.minimum(1.0, L)
            bw = self._kernel_bw(trec_kernel(st, fast, 0.0, topo), 0.0)  # fast tier: the cache fraction is unused
            out = bo * W * d * w
            zero = np.zeros(len(ts))
            if st in (TW, CW):
                size = np.ceil(bi * W * INDEX_BYTES) + bi * W * np.maximum(d, 32) * w + out
                penalty = np.where(d >= FULL_BLOCK_EMB_DIM, 1.0, np.where(d >= 64, HALF_BLOCK_PENALTY,
                                                                         QUARTER_BLOCK_PENALTY))
                fwd = size * penalty / bw
                comm = out / self._bw(W, H)
                parts = (fwd, fwd * mult, comm, comm)
            elif st == RW:
                fwd = (np.ceil(bi / W * W * INDEX_BYTES) + bi / W * W * d * w + out) / bw
                fc = out / self._bw(W, H)
                parts = (fwd, fwd * mult, fc, fc + out * BATCHED_COPY_PERF_FACTOR / bw)
            elif st == TWRW:
                fwd = (np.ceil(bi / H * W * INDEX_BYTES) + bi / H * W * d * w + out) / bw
                intra = out / self._bw(H, H)
                groups = max(1, W // H)
                inter = bo * groups * d * w / self._bw(groups, 1) if groups > 1 else zero
                parts = (fwd, fwd * mult, intra + inter, inter + intra + out * BATCHED_COPY_PERF_FACTOR / bw)
            else:  # data parallel
                fwd = (np.ceil(bi * INDEX_BYTES) + bi * d * w + bo * d * w) / bw
                table = np.array([float(t.rows) for t in ts]) * d * w
                nodes = min(W / H, 2)
                ar = table * (2 * nodes - 1) / nodes / (topo.inter_host.bandwidth * H)
                if W > 2 * H:
                    ar = ar * 2
                parts = (fwd, fwd * mult, zero, ar + table * DP_ELEMENTWISE_KERNELS_PERF_FACTOR / bw)
            for key, a, b, c, e in zip(items, *(x.tolist() for x in parts), strict=True):
                memo[key] = _shard_cost(a, b, c, e, 0.0)  # `ShardCost(a, b, c, e)`, made faster

    def _shard_cost(self, t: TableSpec, st: ShardingType, d: int, tier: str, cf: float) -> ShardCost:
        topo = self.topology
        W, H = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        B, L = float(self.workload.batch_size), t.pooling.expected
        w = max(1.0, float(DTYPE_BYTES[t.dtype]))  # tensor element size (int4 is stored in bytes)
        bi, bo = B * L, B * min(1.0, L)
        kernel = trec_kernel(st, tier, cf, topo)
        bw = self._kernel_bw(kernel, cf)
        mult = topo.bwd_compute_multiplier
        out = bo * W * d * w
        if st in (TW, CW):
            size = math.ceil(bi * W * INDEX_BYTES) + bi * W * max(d, 32) * w + out
            fwd = size * _penalty(d) / bw
            comm = out / self._bw(W, H)
            return ShardCost(fwd, fwd * mult, comm, comm)
        if st == RW:
            fwd = (math.ceil(bi / W * W * INDEX_BYTES) + bi / W * W * d * w + out) / bw
            fc = out / self._bw(W, H)
            return ShardCost(fwd, fwd * mult, fc, fc + out * BATCHED_COPY_PERF_FACTOR / bw)
        if st == TWRW:
            fwd = (math.ceil(bi / H * W * INDEX_BYTES) + bi / H * W * d * w + out) / bw
            intra = out / self._bw(H, H)
            groups = max(1, W // H)
            inter = bo * groups * d * w / self._bw(groups, 1) if groups > 1 else 0.0
            return ShardCost(fwd, fwd * mult, intra + inter, inter + intra + out * BATCHED_COPY_PERF_FACTOR / bw)
        # data parallel
        fwd = (math.ceil(bi * INDEX_BYTES) + bi * d * w + bo * d * w) / bw
        table = t.rows * d * w
        nodes = min(W / H, 2)
        ar = table * (2 * nodes - 1) / nodes / (topo.inter_host.bandwidth * H)
        if W > 2 * H:
            ar *= 2
        return ShardCost(fwd, fwd * mult, 0.0, ar + table * DP_ELEMENTWISE_KERNELS_PERF_FACTOR / bw)

    def rank_loads(self, plan: ShardingPlan) -> np.ndarray:
        """Per rank, the summed Perf.total of its shards (seconds)."""
        sums = RankSums()
        push, totals = sums.groups.append, self._totals
        for tp in plan.tables.values():
            t, st = self.tables[tp.name], tp.sharding_type
            for (rows, cols, tier, cf), where in tp.alike().items():
                total = totals.get((t.name, st, cols, tier, cf))  # `shard_cost`'s key
                if total is None:
                    total = totals[(t.name, st, cols, tier, cf)] = (self.shard_cost(t, st, rows, cols, tier, cf).total,)
                push((_ROW0, total, where))
        return sums.total(1, plan.world_size)[0]

    def plan_cost(self, plan: ShardingPlan) -> float:
        """TorchRec's rating of the plan: max over ranks of summed shard perf (seconds; TorchRec prints ms)."""
        return float(self.rank_loads(plan).max())
