"""Cost model: per-rank lookup time from bytes over tier bandwidth, communication per sharding type over links,
memory per tier. A plan's cost is its slowest rank (forward + backward, compute + comms, no overlap assumed).

Byte formulas (B = batch per rank × world size, L = mean lookups per bag, d = shard columns, w/o/i = weight,
output and index bytes, share = shard rows / table rows, lookups spread over rows as hashed ids are):
  lookups      TW, CW: B·L          RW, TWRW: B·L·share        DP: (B/world)·L
  fwd compute  lookups·d·w·(hit/bw_fast + miss/bw_tier) + (lookups·i + bags·d·o)/bw_fast
  bwd compute  bwd_compute_multiplier × fwd compute (training only)
  comms        TW/CW all-to-all of bags·d·o (+ ids), RW reduce-scatter / all-gather of B·d·o·(W−1)/W,
               TWRW reduce-scatter in the host then all-to-all across hosts, DP all-reduce 2·(W−1)/W·table bytes
  + one link latency per distinct collective call a rank takes part in (`COLLECTIVE_CALLS`; backward calls only
    when training): TW/CW all-to-all fwd + bwd, RW reduce-scatter fwd + all-gather bwd, DP all-reduce bwd.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from embedding.spec import DTYPE_BYTES, TableSpec
from sharding.plan import Shard, ShardingPlan, ShardingType
from sharding.topology import Topology
from sharding.workload import PlanWorkload

__all__ = ["CostModel", "ShardCost", "RankCost", "zipf_miss_rate", "MissCurve", "COLLECTIVE_CALLS"]

MissCurve = Callable[[float], float] | tuple[np.ndarray, np.ndarray]
# collective calls (pass, op) a shard's rank takes part in: each distinct call pays one link latency per iteration
COLLECTIVE_CALLS = {
    ShardingType.TABLE_WISE: (("fwd", "all_to_all"), ("bwd", "all_to_all")),
    ShardingType.COLUMN_WISE: (("fwd", "all_to_all"), ("bwd", "all_to_all")),
    ShardingType.ROW_WISE: (("fwd", "reduce_scatter"), ("bwd", "all_gather")),
    ShardingType.TABLE_ROW_WISE: (("fwd", "reduce_scatter"), ("fwd", "all_to_all"), ("bwd", "all_to_all"),
                                  ("bwd", "all_gather")),
    ShardingType.DATA_PARALLEL: (("bwd", "all_reduce"),)}


def _harmonic(k: float, a: float) -> float:
    """Generalised harmonic number Σ_{i≤k} i^-a: exact to 1,000, Euler–Maclaurin beyond."""
    head = min(int(k), 1000)
    s = float(np.sum(np.arange(1, head + 1, dtype=np.float64) ** -a)) if head else 0.0
    if k <= 1000:
        return s
    x0 = 1000.0
    integral = math.log(k / x0) if abs(a - 1) < 1e-9 else (k ** (1 - a) - x0 ** (1 - a)) / (1 - a)
    return s + integral + (k ** -a - x0 ** -a) / 2


def zipf_miss_rate(rows: int, alpha: float, fraction: float) -> float:
    """Miss rate of a static hot set holding the `fraction`·rows most popular rows of a Zipf(alpha) stream:
    1 − H(f·N, α)/H(N, α). It is the best any cache of that size does on an independent Zipf stream; LRU and
    LFU caches miss more, so pass measured miss-ratio curves where they exist."""
    if fraction <= 0:
        return 1.0
    if fraction >= 1:
        return 0.0
    return max(0.0, 1.0 - _harmonic(max(fraction * rows, 1.0), alpha) / _harmonic(rows, alpha))


@dataclass(frozen=True)
class ShardCost:
    fwd_compute: float = 0.0
    bwd_compute: float = 0.0
    fwd_comms: float = 0.0
    bwd_comms: float = 0.0

    @property
    def total(self) -> float:
        return self.fwd_compute + self.bwd_compute + self.fwd_comms + self.bwd_comms


@dataclass
class RankCost:
    rank: int
    fwd_compute: float = 0.0
    bwd_compute: float = 0.0
    fwd_comms: float = 0.0
    bwd_comms: float = 0.0
    latency: float = 0.0
    memory: dict[str, float] = field(default_factory=dict)
    shards: int = 0

    @property
    def compute(self) -> float:
        return self.fwd_compute + self.bwd_compute

    @property
    def comms(self) -> float:
        return self.fwd_comms + self.bwd_comms + self.latency

    @property
    def total(self) -> float:
        return self.compute + self.comms

    def to_dict(self) -> dict[str, float | int | dict[str, float]]:
        return {"rank": self.rank, "fwd_compute_s": self.fwd_compute, "bwd_compute_s": self.bwd_compute,
                "fwd_comms_s": self.fwd_comms, "bwd_comms_s": self.bwd_comms, "latency_s": self.latency,
                "total_s": self.total, "memory_bytes": dict(self.memory), "shards": self.shards}


class CostModel:
    """Prices shards and plans for one workload on one topology. `miss_curves` maps a table name to a callable
    (cache fraction -> miss rate) or to arrays (fractions, miss rates) to interpolate; other tables use
    `zipf_miss_rate` (uniform access: 1 − fraction)."""

    def __init__(self, workload: PlanWorkload, topology: Topology,
                 miss_curves: Mapping[str, MissCurve] | None = None) -> None:
        self.workload = workload
        self.topology = topology
        self.miss_curves = dict(miss_curves or {})
        self.tables = {t.name: t for t in workload.tables}
        self._memo: dict[tuple, object] = {}  # replicated and equal-sized shards share one price

    # ---- lookups and misses ----
    def miss_rate(self, t: TableSpec, fraction: float) -> float:
        curve = self.miss_curves.get(t.name)
        if curve is not None:
            if callable(curve):
                return float(min(1.0, max(0.0, curve(fraction))))
            xs, ys = curve
            return float(np.clip(np.interp(fraction, xs, ys), 0.0, 1.0))
        if t.access.kind == "zipf":
            return zipf_miss_rate(t.rows, t.access.alpha, fraction)
        return 1.0 - min(1.0, max(0.0, fraction))

    def _traffic(self, t: TableSpec, st: ShardingType, rows: int) -> tuple[float, float]:
        """(lookups, bags) served by a shard of `rows` rows per iteration."""
        w = self.topology.world_size
        b_global = self.workload.batch_size * w
        L = t.pooling.expected
        if st == ShardingType.DATA_PARALLEL:
            return self.workload.batch_size * L, float(self.workload.batch_size)
        share = rows / t.rows if st in (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE) else 1.0
        return b_global * L * share, float(b_global)

    # ---- one shard ----
    def shard_cost(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str,
                   cache_fraction: float = 0.0) -> ShardCost:
        key = ("c", t.name, st, rows, cols, tier, cache_fraction)
        if key not in self._memo:
            self._memo[key] = self._shard_cost(t, st, rows, cols, tier, cache_fraction)
        return self._memo[key]  # type: ignore[return-value]

    def _shard_cost(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str,
                    cache_fraction: float) -> ShardCost:
        topo, wl = self.topology, self.workload
        lookups, bags = self._traffic(t, st, rows)
        if rows == 0:
            lookups = 0.0
        fast = topo.fast
        miss = 0.0 if tier == fast.name else self.miss_rate(t, cache_fraction)
        gather = lookups * cols * DTYPE_BYTES[t.dtype]
        fwd = gather * ((1 - miss) / fast.bandwidth + miss / topo.tier(tier).bandwidth)
        fwd += (lookups * wl.index_bytes + bags * cols * wl.output_bytes) / fast.bandwidth
        bwd = fwd * topo.bwd_compute_multiplier if wl.train else 0.0
        fc, bc = self._comms(t, st, rows, cols, lookups, bags)
        return ShardCost(fwd, bwd, fc, bc if wl.train else 0.0)

    def _comms(self, t: TableSpec, st: ShardingType, rows: int, cols: int, lookups: float,
               bags: float) -> tuple[float, float]:
        topo, wl = self.topology, self.workload
        w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        intra, inter = topo.intra_host.bandwidth, topo.inter_host.bandwidth
        out = bags * cols * wl.output_bytes
        ids = lookups * wl.index_bytes

        def a2a(nbytes: float) -> float:  # bytes leaving (or arriving at) this rank, spread over all ranks
            return nbytes * (h - 1) / w / intra + nbytes * (w - h) / w / inter

        if st in (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE):
            return a2a(out) + a2a(ids), a2a(out)
        if st == ShardingType.ROW_WISE:
            if rows == 0:
                return 0.0, 0.0
            ring = inter if w > h else intra
            rs = out * (w - 1) / w / ring
            return rs + a2a(ids), rs
        if st == ShardingType.TABLE_ROW_WISE:
            if rows == 0:
                return 0.0, 0.0
            rs = out * (h - 1) / h / intra + out / h * (w - h) / w / inter
            return rs + a2a(ids), rs
        ring = inter if w > h else intra  # data parallel: gradient all-reduce of the whole table
        grad = t.rows * cols * DTYPE_BYTES[t.dtype]
        return 0.0, 2 * grad * (w - 1) / w / ring

    def shard_memory(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str,
                     cache_fraction: float = 0.0) -> dict[str, float]:
        """Bytes per tier: weights + optimizer state in `tier`; cache (weights of the cached rows plus FBGEMM's
        per-row cache state, 4 + 16·fraction bytes as TorchRec counts it) and input/output buffers in tier 0."""
        key = ("m", t.name, st, rows, cols, tier, cache_fraction)
        if key not in self._memo:
            self._memo[key] = self._shard_memory(t, st, rows, cols, tier, cache_fraction)
        return dict(self._memo[key])  # type: ignore[call-overload]

    def _shard_memory(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str,
                      cache_fraction: float) -> dict[str, float]:
        topo, wl = self.topology, self.workload
        fast = topo.fast.name
        lookups, bags = self._traffic(t, st, rows)
        mem = {tier: rows * wl.row_bytes(t, cols)}
        buffers = lookups * wl.index_bytes + bags * cols * wl.output_bytes if rows else 0.0
        extra = buffers
        if cache_fraction > 0 and tier != fast:
            extra += cache_fraction * rows * cols * DTYPE_BYTES[t.dtype] + rows * (4 + 16 * cache_fraction)
        mem[fast] = mem.get(fast, 0.0) + extra
        return mem

    # ---- a plan ----
    def breakdown(self, plan: ShardingPlan) -> list[RankCost]:
        topo = self.topology
        ranks = [RankCost(r, memory={t.name: 0.0 for t in topo.tiers}) for r in range(plan.world_size)]
        calls: list[set[tuple[str, str]]] = [set() for _ in range(plan.world_size)]
        for tp in plan.tables.values():
            t = self.tables[tp.name]
            for s in tp.shards:
                rc = ranks[s.rank]
                c = self.shard_cost(t, tp.sharding_type, s.rows, s.cols, s.tier, s.cache_fraction)
                rc.fwd_compute += c.fwd_compute
                rc.bwd_compute += c.bwd_compute
                rc.fwd_comms += c.fwd_comms
                rc.bwd_comms += c.bwd_comms
                rc.shards += 1
                for k, v in self.shard_memory(t, tp.sharding_type, s.rows, s.cols, s.tier,
                                              s.cache_fraction).items():
                    rc.memory[k] = rc.memory.get(k, 0.0) + v
                if topo.world_size > 1:
                    calls[s.rank].update(c for c in COLLECTIVE_CALLS[tp.sharding_type]
                                         if self.workload.train or c[0] == "fwd")
        lat = topo.collective_link(topo.world_size > topo.ranks_per_host).latency
        for rc, k in zip(ranks, calls, strict=True):
            rc.latency = len(k) * lat
        return ranks

    def plan_cost(self, plan: ShardingPlan) -> float:
        """Seconds per iteration of the slowest rank (same figure as `breakdown`, without the memory)."""
        topo = self.topology
        totals = np.zeros(plan.world_size)
        calls: list[set[tuple[str, str]]] = [set() for _ in range(plan.world_size)]
        for tp in plan.tables.values():
            t = self.tables[tp.name]
            cc = [c for c in COLLECTIVE_CALLS[tp.sharding_type] if self.workload.train or c[0] == "fwd"]
            for s in tp.shards:
                totals[s.rank] += self.shard_cost(t, tp.sharding_type, s.rows, s.cols, s.tier, s.cache_fraction).total
                if topo.world_size > 1:
                    calls[s.rank].update(cc)
        lat = topo.collective_link(topo.world_size > topo.ranks_per_host).latency
        return float(max(tot + len(k) * lat for tot, k in zip(totals, calls, strict=True)))

    def shard_cost_of(self, table: str, st: ShardingType, s: Shard) -> ShardCost:
        return self.shard_cost(self.tables[table], st, s.rows, s.cols, s.tier, s.cache_fraction)
