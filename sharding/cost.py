"""Cost model: per-rank lookup time from bytes over tier bandwidth, communication per sharding type over links,
memory per tier, and the fixed per-call costs of executing a step the way TorchRec's DistributedModelParallel
does. A plan's cost is the step time of synchronous ranks (no overlap assumed).

Byte formulas (B = batch per rank × world size, L = mean lookups per bag, d = shard columns, w/o/i = weight,
output and index bytes, share = shard rows / table rows, lookups spread over rows as hashed ids are):
  lookups      TW, CW: B·L          RW, TWRW: B·L·share        DP: (B/world)·L
  fwd compute  lookups·d·w·(hit/bw_fast + miss/bw_tier) + (lookups·i + bags·d·o)/bw_fast
  bwd compute  bwd_compute_multiplier × fwd compute (training only: TBE backward with the fused update)
A calibrated `Topology.stage_bandwidth` (bytes/s per sharding type and TorchRec stage, fitted through TorchRec's
own stages) replaces tier 0's bandwidth in the lookup terms (backward: the tier-0 bytes over the lookup_bwd
figure), each message's op bandwidth by its stage's (the first message is input_dist, later forward ones
output_dist, backward ones output_dist_bwd; DP's all-reduce: lookup_bwd) and DP's optimizer bandwidth.
  optimizer    DP replicas: rows·d·w / optimizer bandwidth (dense step of what the fused update does not cover)
  messages     input KJT all-to-all (every non-DP type) of lookups·i + bags·i (ids + lengths) into the shard's
               rank; TW/CW pooled all-to-all of bags·d·o fwd and the same back in bwd; RW reduce-scatter fwd /
               all-gather bwd of B·d·o; TWRW reduce-scatter in the host then all-to-all across hosts (and back);
               DP gradient all-reduce 2·(W−1)/W·rows·d·w. Only the share that leaves the rank is timed.

How a plan's step is assembled (`breakdown`): TorchRec runs one collective per sharding group (all shards of a
type) per message kind, and every rank joins it, shards or not. So each (group, pass, op) collective costs
max over ranks of the bytes it moves there / the op's bandwidth, and every rank pays it. ALL_TO_ALL_RULE: on CPU
ranks (`Topology.all_to_all_by_mean`) an all-to-all costs the mean over ranks instead: gloo's exchange within a
host is copies by the host's cores, and a one-sided one (every table on one rank: it receives all the ids and
sends all the pooled outputs) measured as fast as a balanced one of the same total bytes (issue 19,
results/validation/i19r_a2a_skew_20261203.md); on a balanced plan mean = max. Fixed per-step costs:
with a calibrated `Topology.stage_overhead` (bytes ≈ 0 microbenchmarks), "base" once per step plus, per group
present, its communication stages on every rank and its lookup stages on the ranks holding its shards;
without one (GPU presets), one op latency per collective call (`COLLECTIVE_CALLS`). Ranks meet at each
collective, so the step = collectives + fixed + max over ranks of the forward lookups + max of the backward
lookups + max of the optimizer + `CostModel.outside` (the step outside the embedding stages: loss, dense
backward, framework: `Topology.step_overhead` + `step_overhead_per_value` per pooled value a rank's batch yields
in training); a rank's `wait` is the step minus its own work and that overhead.
`shard_cost` (what the optimizer adds up per rank) keeps the per-shard bytes terms of each part.

DP_BACKWARD: TorchRec runs a data-parallel group's lookup as FBGEMM's dense TBE (no fused update) inside
`DistributedDataParallel` (torchrec.distributed.embeddingbag `init_data_parallel`): its backward writes a dense
gradient of the whole replica (rows·d, zero-filled, then the ids' rows added) and DDP all-reduces it in the same
stage, so the stage grows with the replica's bytes, not with its ids. With a calibrated DP "lookup_bwd" stage
bandwidth (fitted on that stage's growth over the all-reduce's bytes, `benchmarks.calibrate.stage_plan_bytes`)
that one figure prices the whole stage, and a replica's backward adds no lookup term of its own (before, it added
the fused update's per-id and per-row costs × the backward multiplier: the all-reduce's stage counted twice, and
on a calibration whose backward fit had no per-byte term the per-id bytes made DP plans cost hours).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from embedding.spec import DTYPE_BYTES, TableSpec
from sharding.plan import Shard, ShardingPlan, ShardingType
from sharding.rank_sums import RankSums
from sharding.topology import Topology
from sharding.workload import PlanWorkload

__all__ = ["CostModel", "ShardCost", "RankCost", "zipf_miss_rate", "expected_unique_rows", "MissCurve",
           "COLLECTIVE_CALLS"]

TW, CW, RW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.ROW_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)  # a module name: no enum look-up
MissCurve = Callable[[float], float] | tuple[np.ndarray, np.ndarray]
# collective calls (pass, op) of one sharding group per step, every rank of the world joining each: the input
# KJT all-to-all is three calls (splits, lengths, ids); without calibrated stage overheads each costs one latency
_INPUT = (("fwd", "all_to_all"),) * 3
COLLECTIVE_CALLS = {
    ShardingType.TABLE_WISE: (*_INPUT, ("fwd", "all_to_all"), ("bwd", "all_to_all")),
    ShardingType.COLUMN_WISE: (*_INPUT, ("fwd", "all_to_all"), ("bwd", "all_to_all")),
    ShardingType.ROW_WISE: (*_INPUT, ("fwd", "reduce_scatter"), ("bwd", "all_gather")),
    ShardingType.TABLE_ROW_WISE: (*_INPUT, ("fwd", "reduce_scatter"), ("fwd", "all_to_all"), ("bwd", "all_to_all"),
                                  ("bwd", "all_gather")),
    ShardingType.DATA_PARALLEL: (("bwd", "all_reduce"),)}
_COMM_STAGES = {"fwd": ("input_dist", "output_dist"), "bwd": ("output_dist_bwd",)}
_WORK_STAGES = {"fwd": ("lookup",), "bwd": ("lookup_bwd", "optimizer")}
Message = tuple[str, str, float, float]  # (pass, op, bytes within the host, bytes across hosts) leaving a rank


@lru_cache(maxsize=1 << 16, typed=True)
def _head_sum(head: int, a: float) -> float:
    """Σ_{i≤head} i^-a summed exactly (numpy's pairwise sum), memoised: every k ≥ 1,000 of one exponent shares the
    1,000-term head (the lower bound's tier term asks for 41 shares of each table's rows: 4 s of 10 on f100)."""
    return float(np.sum(np.arange(1, head + 1, dtype=np.float64) ** -a)) if head else 0.0


@lru_cache(maxsize=1 << 16, typed=True)
def _harmonic(k: float, a: float) -> float:
    """Generalised harmonic number Σ_{i≤k} i^-a: exact to 1,000, Euler–Maclaurin beyond. Memoised by the
    arguments and their types (H(rows, α) recurs for each of the 41 shares the bound's tier term asks)."""
    head = min(int(k), 1000)
    s = _head_sum(head, a)
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


def zipf_miss_rates(rows: int, alpha: float, fractions: list) -> np.ndarray:
    """`zipf_miss_rate` at each of `fractions`, the same bits: the same harmonic numbers (called with the same
    arguments) and the same operations, H(rows, α) taken once and without a call per fraction (the bound's tier
    penalty asks 41 shares of every table)."""
    whole = _harmonic(rows, alpha)
    out = np.empty(len(fractions))
    for i, f in enumerate(fractions):
        out[i] = 1.0 if f <= 0 else 0.0 if f >= 1 else 1.0 - _harmonic(max(f * rows, 1.0), alpha) / whole
    return np.where(out > 0.0, out, 0.0)  # max(0.0, x): x only where x > 0.0


_EXACT_RANKS = 1 << 12  # ranks summed one by one; beyond, geometric bins of the smooth tail


def expected_unique_rows(rows: int, kind: str, alpha: float, draws: float) -> float:
    """Expected distinct rows among `draws` independent ids over a table of `rows` rows: Σ_i 1 − (1 − p_i)^draws,
    p_i uniform (1 / rows) or bounded Zipf(alpha) (i^-alpha / H(rows, alpha), as `embedding.generate` draws
    them); other access kinds (traces): `draws` (every id its own row), capped by `rows`. What the fused
    row-wise update of a backward touches (`CostModel.unique_rows`)."""
    if rows <= 0 or draws <= 0:
        return 0.0
    if kind == "uniform":
        return float(-rows * math.expm1(draws * math.log1p(-1.0 / rows))) if rows > 1 else 1.0
    if kind != "zipf":
        return float(min(draws, rows))
    h = _harmonic(rows, alpha)
    head = np.arange(1, min(rows, _EXACT_RANKS) + 1, dtype=np.float64)
    total = float(-np.sum(np.expm1(draws * np.log1p(-(head ** -alpha) / h))))
    if rows > _EXACT_RANKS:
        edges = np.unique(np.geomspace(_EXACT_RANKS + 1, rows + 1, 512).astype(np.int64))
        lo, hi = edges[:-1], edges[1:]
        mid = np.sqrt(lo * (hi - 1.0))  # the bin's geometric middle rank: the tail is smooth in log rank
        total += float(np.sum((hi - lo) * -np.expm1(draws * np.log1p(-(mid ** -alpha) / h))))
    return min(total, float(rows))


@dataclass(frozen=True)
class ShardCost:
    fwd_compute: float = 0.0
    bwd_compute: float = 0.0
    fwd_comms: float = 0.0
    bwd_comms: float = 0.0
    optimizer: float = 0.0

    @property
    def total(self) -> float:
        return self.fwd_compute + self.bwd_compute + self.fwd_comms + self.bwd_comms + self.optimizer


def _shard_cost(fwd_compute: float, bwd_compute: float, fwd_comms: float, bwd_comms: float, optimizer: float,
                ) -> ShardCost:
    """`ShardCost(...)` without the frozen dataclass's per-field `__init__` (`price_many` makes 10^4 of them on
    r1000: a third of its time went there), equal to it field for field."""
    c = object.__new__(ShardCost)
    c.__dict__.update(fwd_compute=fwd_compute, bwd_compute=bwd_compute, fwd_comms=fwd_comms, bwd_comms=bwd_comms,
                      optimizer=optimizer)
    return c


@dataclass
class RankCost:
    """One rank's step: its own lookups and optimizer, the collectives it joins (the same for every rank),
    fixed per-call costs (`latency`: collectives, `overhead`: kernels and framework), and `wait`: time blocked
    at collectives for slower peers, and `other`: the step's time outside the embedding stages
    (`CostModel.outside`), so that work + wait + other = the plan's step on every rank."""

    rank: int
    fwd_compute: float = 0.0
    bwd_compute: float = 0.0
    fwd_comms: float = 0.0
    bwd_comms: float = 0.0
    latency: float = 0.0
    overhead: float = 0.0
    optimizer: float = 0.0
    wait: float = 0.0
    other: float = 0.0
    memory: dict[str, float] = field(default_factory=dict)
    shards: int = 0

    @property
    def compute(self) -> float:
        return self.fwd_compute + self.bwd_compute + self.optimizer + self.overhead

    @property
    def comms(self) -> float:
        return self.fwd_comms + self.bwd_comms + self.latency

    @property
    def total(self) -> float:
        return self.compute + self.comms

    @property
    def elapsed(self) -> float:
        return self.total + self.wait + self.other

    def to_dict(self) -> dict[str, float | int | dict[str, float]]:
        return {"rank": self.rank, "fwd_compute_s": self.fwd_compute, "bwd_compute_s": self.bwd_compute,
                "optimizer_s": self.optimizer, "overhead_s": self.overhead, "fwd_comms_s": self.fwd_comms,
                "bwd_comms_s": self.bwd_comms, "latency_s": self.latency, "total_s": self.total,
                "wait_s": self.wait, "other_s": self.other, "elapsed_s": self.elapsed,
                "memory_bytes": dict(self.memory),
                "shards": self.shards}


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
        self._rows: dict[object, int] = {0: 0, 1: 1, 2: 2, 3: 3}  # `_accumulate`'s sums: work, count, then keys

    def outside(self) -> float:
        """Seconds per step outside the embedding stages (loss, its backward, the dense gradients, framework),
        the same for every plan of the workload: `Topology.step_overhead` + (training)
        `Topology.step_overhead_per_value` × the pooled values a rank's batch yields (batch × Σ table dims),
        which the loss, its backward and the dense gradients run over. `dlrmbench calibrate` measures the
        per-value figure but writes it under `not_priced`, which prices the constant alone: on three validation
        A/Bs pricing it did not lower the step's median error (results/validation/costmodel_rounds_20261201.md
        sections 5–6: 14% → 24%, 15% → 24%, the stages it adds to priced high; section 11, a busy machine: 21% →
        21%, p90 63% → 65%). A file with a top-level `step_overhead_per_value` prices it (the A/B's "on")."""
        topo = self.topology
        if not (self.workload.train and topo.step_overhead_per_value):
            return topo.step_overhead
        values = self.workload.batch_size * sum(t.dim for t in self.workload.tables)
        return topo.step_overhead + topo.step_overhead_per_value * values

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

    def miss_rates(self, t: TableSpec, fractions: list) -> np.ndarray:
        """`miss_rate` of table t at each of `fractions`, the same floats (a Zipf table without a measured curve
        in one `zipf_miss_rates` call)."""
        if self.miss_curves.get(t.name) is None and t.access.kind == "zipf":
            return zipf_miss_rates(t.rows, t.access.alpha, fractions)
        return np.array([self.miss_rate(t, f) for f in fractions], dtype=np.float64)

    def _traffic(self, t: TableSpec, st: ShardingType, rows: int) -> tuple[float, float]:
        """(lookups, bags) served by a shard of `rows` rows per iteration."""
        w = self.topology.world_size
        b_global = self.workload.batch_size * w
        L = t.pooling.expected
        if st == DP:
            return self.workload.batch_size * L, float(self.workload.batch_size)
        share = rows / t.rows if st in (RW, TWRW) else 1.0
        return b_global * L * share, float(b_global)

    # ---- one shard ----
    def shard_cost(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str,
                   cache_fraction: float = 0.0) -> ShardCost:
        key = ("c", t.name, st, rows, cols, tier, cache_fraction)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._shard_cost(t, st, rows, cols, tier, cache_fraction)
        return got  # type: ignore[return-value]

    def price_many(self, keys: list[tuple[TableSpec, ShardingType, int, int, str, float]]) -> None:
        """Memoise `shard_cost`, `message_times` and `shard_memory` of many shards (t, type, rows, cols, tier,
        cache fraction) at once: numpy over the shards of one type, each term the same IEEE operations in the same order as
        `_shard_cost` (so the memo holds the same floats; tests/sharding checks equality). Covers shards in the
        fast tier without `Topology.lookup_weights` (what the optimizer prices first: every option of every
        table); the rest are left to `shard_cost`."""
        topo, wl, memo = self.topology, self.workload, self._memo
        fast = topo.fast.name
        if topo.lookup_weights:
            return
        todo: dict[ShardingType, dict[tuple, tuple[TableSpec, int, int]]] = {}
        for t, st, rows, cols, tier, cf in keys:
            key = ("c", t.name, st, rows, cols, tier, cf)
            if tier == fast and key not in memo:
                todo.setdefault(st, {})[key] = (t, rows, cols)
        w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        batch, train = wl.batch_size, wl.train
        mult = topo.bwd_compute_multiplier
        for st, items in todo.items():
            ts = [x[0] for x in items.values()]
            rows = np.array([x[1] for x in items.values()], dtype=np.float64)
            cols = np.array([x[2] for x in items.values()], dtype=np.float64)
            pool = np.array([t.pooling.expected for t in ts])
            nbytes = np.array([float(DTYPE_BYTES[t.dtype]) for t in ts])
            if st == DP:  # `_traffic`
                lookups, bags = float(batch) * pool, np.full(len(ts), float(batch))
            else:
                b_global = float(batch * w)
                lookups, bags = b_global * pool, np.full(len(ts), b_global)
                if st in (RW, TWRW):
                    lookups = lookups * (rows / np.array([float(t.rows) for t in ts]))
            used = np.where(rows == 0, 0.0, lookups)  # `_lookup_bytes`: fast tier, no miss
            gather = used * cols * nbytes
            near = (used * wl.index_bytes + bags * cols * wl.output_bytes) + gather
            fwd = near / topo.stage_bw(st.short, "lookup", topo.fast.bandwidth)
            bwd = np.zeros(len(ts))
            if train and st == DP and "lookup_bwd" in topo.stage_bandwidth.get("DP", {}):  # DP_BACKWARD
                if w == 1:
                    bwd = rows * cols * nbytes / topo.stage_bw("DP", "lookup_bwd", 1.0)
            elif train:
                if st != DP and "lookup_bwd" in topo.stage_bandwidth.get(st.short, {}):
                    bwd = near / topo.stage_bw(st.short, "lookup_bwd", 1.0) + 0.0 * mult
                else:
                    bwd = (near / topo.stage_bw(st.short, "lookup", topo.fast.bandwidth)) * mult
            opt = np.zeros(len(ts))
            if st == DP and train:
                opt = rows * cols * nbytes / topo.stage_bw("DP", "optimizer", topo.dense_update_bandwidth)
            msgs = self._messages_many(st, rows, cols, nbytes, lookups, bags, w, h)
            secs, arrays = [], []  # (pass, op, seconds (n,)) as `message_times`
            for i, (p, op, intra, inter) in enumerate(msgs):
                if train or p == "fwd":
                    bw, across = self._message_bw(st, i, p, op)
                    arrays.append((p, intra / bw + inter / across))
                    secs.append((p, op, arrays[-1][1].tolist()))
            comms = {"fwd": np.zeros(len(ts)), "bwd": np.zeros(len(ts))}
            for p, v in arrays:  # each shard's messages added in order, as `_shard_cost` adds them (elementwise)
                comms[p] = comms[p] + v
            # `_shard_memory` (fast tier: no cache): weights + optimizer state, then the input/output buffers
            per_width: dict[tuple[str, int], float] = {}  # `row_bytes` depends on the dtype and width alone
            per_row = np.array([per_width[(t.dtype, c)] if (t.dtype, c) in per_width else
                                per_width.setdefault((t.dtype, c), wl.row_bytes(t, c))
                                for t, c in zip(ts, cols.tolist(), strict=True)])
            buffers = np.where(rows == 0, 0.0, lookups * wl.index_bytes + bags * cols * wl.output_bytes)
            mem = (rows * per_row + buffers).tolist()
            empty = (rows == 0).tolist() if w > 1 else [True] * len(ts)
            sent = list(zip(*[[(p, op, x) for x in v] for p, op, v in secs], strict=True)) or [()] * len(ts)  # by shard
            for j, (key, f, b, o, cf_, cb) in enumerate(zip(items, fwd.tolist(), bwd.tolist(), opt.tolist(),
                                                            comms["fwd"].tolist(), comms["bwd"].tolist(),
                                                            strict=True)):
                mkey = ("m", *key[1:])
                if mkey not in memo:
                    memo[mkey] = {fast: mem[j]}
                tkey = ("t", key[1], st, key[3], key[4])
                if empty[j]:
                    memo.setdefault(tkey, [])
                    memo[key] = _shard_cost(f, b, 0.0, 0.0, o)
                    continue
                if tkey not in memo:
                    memo[tkey] = list(sent[j])  # `message_times`' list
                memo[key] = _shard_cost(f, b, cf_, cb, o)

    def _messages_many(self, st: ShardingType, rows: np.ndarray, cols: np.ndarray, nbytes: np.ndarray,
                       lookups: np.ndarray, bags: np.ndarray, w: int, h: int,
                       ) -> list[tuple[str, str, np.ndarray | float, np.ndarray | float]]:
        """`messages` of n shards of one type (those with no rows, or w = 1, send none: `price_many` drops
        them), each byte count the same operations in the same order."""
        wl = self.workload
        if w == 1:
            return []
        across = w > h
        if st == DP:
            ring = 2 * (w - 1) / w * rows * cols * nbytes
            return [("bwd", "all_reduce", 0.0, ring) if across else ("bwd", "all_reduce", ring, 0.0)]
        out = bags * cols * wl.output_bytes
        ids = (lookups + bags) * wl.index_bytes
        msgs: list = [("fwd", "all_to_all", ids * (h - 1) / w, ids * (w - h) / w)]
        if st in (TW, CW):
            a, b = out * (h - 1) / w, out * (w - h) / w
            return msgs + [("fwd", "all_to_all", a, b), ("bwd", "all_to_all", a, b)]
        if st == RW:
            ring = (0.0, out * (w - 1) / w) if across else (out * (w - 1) / w, 0.0)
            return msgs + [("fwd", "reduce_scatter", *ring), ("bwd", "all_gather", *ring)]
        intra, inter = out * (h - 1) / h, out / h * (w - h) / w
        return msgs + [("fwd", "reduce_scatter", intra, 0.0), ("fwd", "all_to_all", 0.0, inter),
                       ("bwd", "all_to_all", 0.0, inter), ("bwd", "all_gather", intra, 0.0)]

    def llc_miss(self, t: TableSpec) -> float:
        """Share of a table's row reads that miss the host's last-level cache (`Topology.llc_bytes`; 0 without
        one): the LLC is shared by every table of the host in proportion to its bytes, so a table keeps the
        fraction f = LLC / (all tables' bytes / hosts) of its rows and misses as a hot set of f·rows leaves
        (`zipf_miss_rate`; uniform ids: 1 − f). Plan-independent, so shards stay additive for the optimizer."""
        topo = self.topology
        if not topo.llc_bytes:
            return 0.0
        key = ("llc", t.name)
        if key not in self._memo:
            host = sum(x.rows * x.dim * DTYPE_BYTES[x.dtype] for x in self.workload.tables) / topo.num_hosts
            frac = min(1.0, topo.llc_bytes / max(host, 1.0))
            self._memo[key] = (zipf_miss_rate(t.rows, t.access.alpha, frac) if t.access.kind == "zipf"
                               else 1.0 - frac)
        return self._memo[key]  # type: ignore[return-value]

    def _lookup_bytes(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str,
                      cache_fraction: float) -> tuple[float, float, float]:
        """(tier-0 bytes of a shard's forward lookups, of its backward, bytes gathered from `tier` on misses).
        With `Topology.lookup_weights`, each id adds its "id_bytes" and each tier-0 row byte that misses the
        last-level cache (`llc_miss`) its "dram" extra; the backward's row bytes count per distinct row for the
        "unique_rows" share of them (`unique_share`; 1 in calibrated files), per id for the rest."""
        topo, wl = self.topology, self.workload
        lookups, bags = self._traffic(t, st, rows)
        if rows == 0:
            lookups = 0.0
        miss = 0.0 if tier == topo.fast.name else self.miss_rate(t, cache_fraction)
        gather = lookups * cols * DTYPE_BYTES[t.dtype]
        rest = lookups * wl.index_bytes + bags * cols * wl.output_bytes
        llc, lw = self.llc_miss(t), topo.lookup_weights
        if not lw:  # the weights below are 0: the same figure (near · (1 + 0) + 0 adds nothing to finite bytes)
            near = gather * (1 - miss)
            return rest + near, rest + near, gather * miss
        per_unique = lw.get("lookup_bwd", {}).get("unique_rows", 0.0)
        rows_bwd = (1 - per_unique) + per_unique * self.unique_share(t, st) if per_unique and lookups else 1.0
        fwd, bwd = (rest + gather * (1 - miss) * f * (1 + llc * lw.get(s, {}).get("dram", 0.0))
                    + lookups * lw.get(s, {}).get("id_bytes", 0.0)
                    for s, f in (("lookup", 1.0), ("lookup_bwd", rows_bwd)))
        # a cost per distinct row the fused update touches, whatever its width (calibrate.ROW_NOTE)
        bwd += lookups * rows_bwd * lw.get("lookup_bwd", {}).get("row_bytes", 0.0)
        return fwd, bwd, gather * miss

    def unique_share(self, t: TableSpec, st: ShardingType) -> float:
        """Distinct rows a shard's ids touch per step / its ids (≤ 1): what the backward's fused row-wise update
        reads and writes once per row (`lookup_weights["lookup_bwd"]["unique_rows"]`). Ids spread over the
        rows as hashed ids are, so a row-wise shard holding a share of the rows gets that share of the table's
        ids and of its distinct rows: the same ratio as the whole table (`expected_unique_rows` of the global
        batch's ids). A data-parallel replica's backward is a dense gradient, not the fused update: 1."""
        if st == DP:
            return 1.0
        key = ("u", t.name)
        if key not in self._memo:
            ids = self.workload.batch_size * self.topology.world_size * t.pooling.expected
            uniq = expected_unique_rows(t.rows, t.access.kind, t.access.alpha, ids)
            self._memo[key] = min(1.0, uniq / ids) if ids > 0 else 1.0
        return self._memo[key]  # type: ignore[return-value]

    def _shard_cost(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str,
                    cache_fraction: float) -> ShardCost:
        topo, wl = self.topology, self.workload
        fast, fast_bwd, slow = self._lookup_bytes(t, st, rows, cols, tier, cache_fraction)
        slow_s = slow / topo.tier(tier).bandwidth
        fwd = fast / topo.stage_bw(st.short, "lookup", topo.fast.bandwidth) + slow_s
        bwd = 0.0
        dp_fitted = st == DP and "lookup_bwd" in topo.stage_bandwidth.get("DP", {})
        if wl.train and dp_fitted:
            # DP_BACKWARD: a replica's backward is a dense gradient and its all-reduce, both in proportion to the
            # replica's bytes, priced per all-reduce byte by the fitted DP "lookup_bwd" bandwidth (`messages`)
            bwd = 0.0 if topo.world_size > 1 else rows * cols * DTYPE_BYTES[t.dtype] / topo.stage_bw(
                "DP", "lookup_bwd", 1.0)
        elif wl.train:
            fitted = st != DP and "lookup_bwd" in topo.stage_bandwidth.get(st.short, {})
            bwd = (fast_bwd / topo.stage_bw(st.short, "lookup_bwd", 1.0) + slow_s * topo.bwd_compute_multiplier
                   if fitted else (fast_bwd / topo.stage_bw(st.short, "lookup", topo.fast.bandwidth) + slow_s)
                   * topo.bwd_compute_multiplier)
        opt = 0.0
        if st == DP and wl.train:
            opt = rows * cols * DTYPE_BYTES[t.dtype] / topo.stage_bw("DP", "optimizer", topo.dense_update_bandwidth)
        comms = {"fwd": 0.0, "bwd": 0.0}
        for p, _, secs in self.message_times(t, st, rows, cols):
            comms[p] += secs
        return ShardCost(fwd, bwd, comms["fwd"], comms["bwd"], opt)

    def messages(self, t: TableSpec, st: ShardingType, rows: int, cols: int) -> list[Message]:
        """What a shard's rank sends per step (training messages included): (pass, op, bytes to peers in its
        host, bytes to other hosts)."""
        topo, wl = self.topology, self.workload
        w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
        if w == 1 or rows == 0:
            return []
        across = w > h
        if st == DP:
            ring = 2 * (w - 1) / w * rows * cols * DTYPE_BYTES[t.dtype]
            return [("bwd", "all_reduce", 0.0, ring) if across else ("bwd", "all_reduce", ring, 0.0)]
        lookups, bags = self._traffic(t, st, rows)
        out = bags * cols * wl.output_bytes

        def spread(nbytes: float) -> tuple[float, float]:  # a rank's exchange with all ranks, itself excluded
            return nbytes * (h - 1) / w, nbytes * (w - h) / w

        msgs: list[Message] = [("fwd", "all_to_all", *spread((lookups + bags) * wl.index_bytes))]
        if st in (TW, CW):
            return msgs + [("fwd", "all_to_all", *spread(out)), ("bwd", "all_to_all", *spread(out))]
        if st == RW:
            ring = (0.0, out * (w - 1) / w) if across else (out * (w - 1) / w, 0.0)
            return msgs + [("fwd", "reduce_scatter", *ring), ("bwd", "all_gather", *ring)]
        intra, inter = out * (h - 1) / h, out / h * (w - h) / w  # table-row-wise: in the host, then across
        return msgs + [("fwd", "reduce_scatter", intra, 0.0), ("fwd", "all_to_all", 0.0, inter),
                       ("bwd", "all_to_all", 0.0, inter), ("bwd", "all_gather", intra, 0.0)]

    @staticmethod
    def message_stage(st: ShardingType, index: int, p: str) -> str:
        """The TorchRec stage (`sharding.topology.STAGES`) that sends message `index` of `messages` in pass `p`."""
        if st == DP:
            return "lookup_bwd"  # DDP's gradient all-reduce runs inside the backward of the lookups
        return "input_dist" if index == 0 else ("output_dist" if p == "fwd" else "output_dist_bwd")

    def message_times(self, t: TableSpec, st: ShardingType, rows: int, cols: int) -> list[tuple[str, str, float]]:
        """(pass, op, seconds of bytes over the op's (or the stage's fitted) bandwidth) of each message a shard
        sends in one step."""
        key = ("t", t.name, st, rows, cols)
        got = self._memo.get(key)
        if got is None:
            train, out = self.workload.train, []
            for i, (p, op, intra, inter) in enumerate(self.messages(t, st, rows, cols)):
                if train or p == "fwd":
                    bw, across = self._message_bw(st, i, p, op)
                    out.append((p, op, intra / bw + inter / across))
            got = self._memo[key] = out
        return got  # type: ignore[return-value]

    def _message_bw(self, st: ShardingType, index: int, p: str, op: str) -> tuple[float, float]:
        """(bytes/s within a host, across hosts) of message `index` of a shard of type `st`: the topology's, read
        once per model."""
        key = ("bw", st, index, p, op)
        got = self._memo.get(key)
        if got is None:
            topo = self.topology
            got = self._memo[key] = (topo.stage_bw(st.short, self.message_stage(st, index, p),
                                                   topo.collective(op, False).bandwidth),
                                     topo.collective(op, True).bandwidth)
        return got  # type: ignore[return-value]

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
        """Per rank: work, the collectives it joins, fixed costs, memory and the wait for slower peers."""
        return self._assemble(plan, memory=True)[0]

    def plan_cost(self, plan: ShardingPlan) -> float:
        """Seconds per training (or inference) step of the plan: the same figure as every rank's
        `breakdown(plan)[r].elapsed` (the same sums as `_assemble`, without building each rank's record)."""
        parts, _, coll, held, _ = self._accumulate(plan, memory=False)
        return self._step(parts, coll, held, plan.world_size)[0]

    def _step(self, parts: np.ndarray, coll: dict, held: dict, w: int,
              ) -> tuple[float, float, np.ndarray, np.ndarray, dict[str, float]]:
        """The one formula of a step from `_accumulate`'s sums: (step seconds, collective latency, fixed work
        (3, W), phases = work + fixed (3, W), collective seconds per pass). Every rank joins each collective and
        waits for its busiest rank; each phase waits for its busiest rank."""
        latency, work = self._fixed(held, w)
        comms = {"fwd": 0.0, "bwd": 0.0}
        for (_, p, op), secs in coll.items():
            comms[p] += self.collective_price(op, secs)
        phases = parts + work
        step = float(comms["fwd"] + comms["bwd"] + latency + phases.max(axis=1).sum()) + self.outside()
        return step, latency, work, phases, comms

    def resource_loads(self, plan: ShardingPlan) -> tuple[dict[str, np.ndarray], float]:
        """Per resource whose maximum over ranks the step pays ("fwd compute", "bwd compute", "optimizer" with
        their fixed work, and each collective "TW fwd all_to_all", …), its seconds on every rank; and the fixed
        rest (collective latencies + `outside`). step = Σ max + rest; Σ (max − mean) is what imbalance
        costs: a plan of the same shards with every resource at its mean would cost step − Σ (max − mean)."""
        loads: dict[str, np.ndarray] = {}
        step = self._assemble(plan, memory=False, loads=loads)[1]
        return loads, step - sum(float(v.max()) for v in loads.values())

    def collective_price(self, op: str, secs: np.ndarray) -> float:
        """Seconds every rank pays for one collective whose bytes put `secs` on each rank (ALL_TO_ALL_RULE): the
        busiest rank's, or for an all-to-all on a topology that prices it by the mean
        (`Topology.all_to_all_by_mean`), the mean over ranks."""
        if self.prices_by_mean(op):
            return float(secs.sum()) / len(secs)
        return float(secs.max())

    def prices_by_mean(self, op: str) -> bool:
        return op == "all_to_all" and self.topology.all_to_all_by_mean

    def _accumulate(self, plan: ShardingPlan, memory: bool) -> tuple[np.ndarray, np.ndarray, dict, dict, dict]:
        """Per rank, summed over its shards: (fwd, bwd, optimizer) work (3, W), shard counts, each collective's
        seconds ((group, pass, op) -> (W,)), the ranks holding each group, and (with `memory`) bytes per tier.
        Each entry gets its shards' terms in table order (`RankSums`: one compiled call)."""
        w = plan.world_size
        coll: dict[tuple[ShardingType, str, str], int] = {}  # (group, pass, op) -> row, in first-seen order
        mems: dict[str, int] = {}  # tier -> row, in first-seen order
        held: dict[ShardingType, set[int]] = {}
        sums = RankSums()
        push, seen, memo, terms = sums.groups.append, set(), self._memo, self._terms
        last = None  # the previous shape's keys: most shapes share them (one interned tuple per type and tier)
        for tp in plan.tables.values():
            t, st = self.tables[tp.name], tp.sharding_type
            group = held.setdefault(st, set())
            for (rows, cols, tier, cf), where in tp.alike().items():
                got = memo.get(("a", t.name, st, rows, cols, tier, cf, memory)) or terms(t, st, rows, cols, tier,
                                                                                           cf, memory)
                push((got[0], got[1], where))
                if len(group) < w:  # a group on every rank already (data-parallel's) gains nothing
                    group.update(where)
                if got[2] is last:  # seen: no `id` call per shape
                    continue
                last = got[2]
                if id(last) not in seen:  # first seen here (one tuple per distinct list): `_step` sums
                    seen.add(id(last))  # collectives in that order
                    for k, q in last:
                        if k not in coll and k not in mems:
                            (mems if isinstance(k, str) else coll)[k] = q
        table = sums.total(len(self._rows), w)
        mem: dict[str, np.ndarray] = {t.name: np.zeros(w) for t in self.topology.tiers}
        mem.update({k: table[q] for k, q in mems.items()})
        return (table[:3], table[3].astype(np.int64), {k: table[q] for k, q in coll.items()}, held, mem)

    def _terms(self, t: TableSpec, st: ShardingType, rows: int, cols: int, tier: str, cache_fraction: float,
               memory: bool) -> tuple[tuple[int, ...], tuple[float, ...], tuple[tuple[object, int], ...]]:
        """What one shard adds to its rank in `_accumulate`: (rows of the sums table, values, (collective or tier,
        row) of the rows past the first four), in the order the terms are added: fwd, bwd and optimizer work, 1
        (the shard count), each message's seconds, then (with `memory`) bytes per tier."""
        key = ("a", t.name, st, rows, cols, tier, cache_fraction, memory)
        got = self._memo.get(key)
        if got is None:
            c = self.shard_cost(t, st, rows, cols, tier, cache_fraction)
            at, vals, keys = [0, 1, 2, 3], [c.fwd_compute, c.bwd_compute, c.optimizer, 1.0], []
            extra: list[tuple[object, float]] = [((st, p, op), secs) for p, op, secs in
                                                 self.message_times(t, st, rows, cols)]
            if memory:
                extra += self.shard_memory(t, st, rows, cols, tier, cache_fraction).items()
            for k, v in extra:
                q = self._rows.setdefault(k, len(self._rows))  # type: ignore[arg-type]
                at.append(q)
                vals.append(v)
                keys.append((k, q))
            keys_ = tuple(keys)
            got = self._memo[key] = (tuple(at), tuple(vals), self._memo.setdefault(("keys", keys_), keys_))
        return got  # type: ignore[return-value]

    def _assemble(self, plan: ShardingPlan, memory: bool, loads: dict[str, np.ndarray] | None = None,
                  ) -> tuple[list[RankCost], float]:
        w = plan.world_size
        ranks = [RankCost(r, memory={t.name: 0.0 for t in self.topology.tiers}) for r in range(w)]
        parts, count, coll, held, mem = self._accumulate(plan, memory)
        for r, rc in enumerate(ranks):
            rc.fwd_compute, rc.bwd_compute, rc.optimizer = (float(x) for x in parts[:, r])
            rc.shards = int(count[r])
            if memory:
                rc.memory.update({k: float(v[r]) for k, v in mem.items()})
        step, latency, work, phases, comms = self._step(parts, coll, held, w)
        for rc in ranks:
            rc.fwd_comms, rc.bwd_comms = comms["fwd"], comms["bwd"]
        if loads is not None:
            loads.update(zip(("fwd compute", "bwd compute", "optimizer"), phases, strict=True))
            loads.update({f"{st.short} {p} {op}": (np.full(w, self.collective_price(op, v)) if self.prices_by_mean(op)
                                                    else v)
                          for (st, p, op), v in coll.items()})
        other = self.outside()
        for rc in ranks:
            rc.latency, rc.overhead, rc.other = latency, float(work[:, rc.rank].sum()), other
            rc.wait = max(0.0, step - other - rc.total)
        return ranks, step

    def stage_breakdown(self, plan: ShardingPlan) -> dict[str, float]:
        """The step split the way `benchmarks.distributed.stages` times it (seconds): "lookup", "lookup_bwd" (DP's
        gradient all-reduce included) and "optimizer" the max over ranks of their work with its fixed part; the
        collective stages "input_dist", "output_dist", "output_dist_bwd" the sum over sharding groups of the max
        over ranks of what the stage sends, with their fixed part; "outside" `outside()`; "fixed"
        collective latencies when no stage overheads are calibrated. Sums to about `plan_cost` (which takes the
        max over ranks of a group's messages of one op together)."""
        w = plan.world_size
        work = np.zeros((3, w))
        sent: dict[tuple[ShardingType, str, str], np.ndarray] = {}
        held: dict[ShardingType, set[int]] = {}
        for tp in plan.tables.values():
            t, st = self.tables[tp.name], tp.sharding_type
            for s in tp.shards:
                c = self.shard_cost(t, st, s.rows, s.cols, s.tier, s.cache_fraction)
                work[:, s.rank] += (c.fwd_compute, c.bwd_compute, c.optimizer)
                held.setdefault(st, set()).add(s.rank)
                for i, (p, op, secs) in enumerate(self.message_times(t, st, s.rows, s.cols)):
                    k = (st, self.message_stage(st, i, p), op if self.prices_by_mean(op) else "")
                    sent.setdefault(k, np.zeros(w))[s.rank] += secs
        latency, fixed = self._fixed(held, w)
        work += fixed
        out = dict(zip(("lookup", "lookup_bwd", "optimizer"), (float(x) for x in work.max(axis=1)), strict=True))
        for k in ("input_dist", "output_dist", "output_dist_bwd"):
            out[k] = 0.0
        for (_, stage, op), v in sent.items():
            out[stage] += self.collective_price(op, v)
        topo = self.topology
        if topo.stage_overhead and w > 1:
            for name in ["base", *(st.short for st in held)]:
                for k in ("input_dist", "output_dist", "output_dist_bwd"):
                    if k != "output_dist_bwd" or self.workload.train:
                        out[k] += topo.stage_overhead.get(name, {}).get(k, 0.0)
        else:
            out["fixed"] = latency
        out["outside"] = self.outside()
        return out

    def stage_seconds(self, plan: ShardingPlan) -> dict[str, dict[str, float]]:
        """Byte terms of the step per sharding type and TorchRec stage (fixed costs left out): lookups the max
        over ranks of the type's kernels, collectives what the stage sends priced as `collective_price` does (the max
        over ranks; an all-to-all on CPU ranks: the mean, the max on the balanced calibration plans). With every
        bandwidth 1 these are the bytes `benchmarks.calibrate` fits stage bandwidths on."""
        acc: dict[str, dict[str, np.ndarray]] = {}
        w = plan.world_size
        for tp in plan.tables.values():
            t, st = self.tables[tp.name], tp.sharding_type
            per = acc.setdefault(st.short, {})
            for s in tp.shards:
                c = self.shard_cost(t, st, s.rows, s.cols, s.tier, s.cache_fraction)
                parts = [("lookup", c.fwd_compute), ("lookup_bwd", c.bwd_compute), ("optimizer", c.optimizer)]
                parts += [((self.message_stage(st, i, p), op if self.prices_by_mean(op) else ""), secs)
                          for i, (p, op, secs) in enumerate(self.message_times(t, st, s.rows, s.cols))]
                for k, v in parts:
                    per.setdefault(k, np.zeros(w))[s.rank] += v
        out: dict[str, dict[str, float]] = {}
        for g, per in acc.items():
            for k, v in per.items():
                stage, op = k if isinstance(k, tuple) else (k, "")
                out.setdefault(g, {})[stage] = out.get(g, {}).get(stage, 0.0) + self.collective_price(op, v)
        return out

    def _fixed(self, held: dict[ShardingType, set[int]], w: int) -> tuple[float, np.ndarray]:
        """(fixed collective seconds every rank pays, fixed work seconds per phase (fwd, bwd, optimizer) × rank)
        of the sharding groups present (`held`: group -> ranks holding its shards)."""
        topo, train = self.topology, self.workload.train
        work, latency = np.zeros((3, w)), 0.0
        passes = ("fwd", "bwd") if train else ("fwd",)
        if topo.stage_overhead:
            groups = [("base", set(range(w)))] + [(st.short, ranks) for st, ranks in held.items()]
            for name, holders in groups:
                o = topo.stage_overhead.get(name, {})
                for p in passes:
                    latency += sum(o.get(s, 0.0) for s in _COMM_STAGES[p]) if w > 1 else 0.0
                    for s in _WORK_STAGES[p]:
                        phase, who = (2, range(w)) if s == "optimizer" else (int(p == "bwd"), holders)
                        for r in (range(w) if name == "base" else who):
                            work[phase, r] += o.get(s, 0.0)
        elif w > 1:
            across = w > topo.ranks_per_host
            latency = sum(topo.collective(op, across).latency for st in held for p, op in COLLECTIVE_CALLS[st]
                          if p in passes)
        return latency, work

    def shard_cost_of(self, table: str, st: ShardingType, s: Shard) -> ShardCost:
        return self.shard_cost(self.tables[table], st, s.rows, s.cols, s.tier, s.cache_fraction)
