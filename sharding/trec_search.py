"""TorchRec 1.8's planner search, re-stated: its default proposers' sequence, its greedy partitioner, the best plan
by its rating, over a search space of sharding options, bounded by a counted number of partitions (no clock).

What it re-states (torchrec/distributed/planner, read for this): `EmbeddingShardingPlanner.plan` runs its default
proposers in order, `GridSearchProposer` (every combination of options, only where there are at most 10^4),
`GreedyProposer()` (options per table sorted by their largest shard's perf; after each proposal the table whose
current option holds the most storage, (max hbm, sum hbm, max ddr, sum ddr), moves to its next option),
`GreedyProposer(use_depth=False)` (sorted by summed perf) and `UniformProposer` (for each sharding type every table
has, each table's best option of that type). With the default threshold none of them reads the feedback, so the
sequence of proposals is fixed before any is partitioned. A proposal seen before (the same set of options) is
not partitioned again. Each new proposal goes through `GreedyPerfPartitioner` (sort by storage): uniform options
(RW, DP) one shard per rank in rank order; the others grouped per table, sorted by their summed storage,
largest first (stable); TW/CW shards each onto the rank least loaded by perf (ties: local rank, then rank) whose
remaining storage holds it; TWRW onto the first host, hosts sorted by summed perf (stable), whose ranks hold its
shards in rank order. A proposal that does not fit is skipped; the best is the first with the least max-over-ranks
summed `Perf.total` (`NoopPerfModel`).

The search space is a list of `Option`s in enumeration order. `torchrec_space` builds it from TorchRec's own
enumerator and storage reservation (used to check the search against TorchRec's planner in the same process);
`model_space` from our models, in a fixed order. TorchRec's enumerator orders each table's sharding types and
kernels by iterating a set of strings (`EmbeddingEnumerator._filter_sharding_types` / `_filter_compute_kernels`),
so its order, and with it which of two equally rated options or plans its planner keeps, changes with
PYTHONHASHSEED from one process to the next; ratings do not.

Speed (issue 16: this search runs on every small instance): the space is laid out as arrays once per search
(`_Arrays`), each proposal is placed and rated in one compiled pass (`trec_search_kernel.partition_rate`, the
same ranks and floats as `partition` and `_rating`, which stay as the reference: `search(reference=True)`), and
the proposers' sort keys are computed once per option (`option_terms`); the proposers' sequences are built whole
as rows of option indices (`_index_proposers`, the greedy one compiled: `greedy_sequence`) and the new proposals
within budget placed and rated in one compiled call (`_search_rows`).
"""
from __future__ import annotations

import heapq
import itertools
import math
import operator
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sharding.layouts import row_ranges, torchrec_column_pieces
from sharding.plan import Shard, ShardingPlan, ShardingType, TablePlan
from sharding.topology import Topology
from sharding.trec_search_kernel import (
    DEVICE,
    HOST,
    UNIFORM,
    greedy_sequence,
    option_terms,
    partition_rate,
    partition_rate_all,
)
from sharding.workload import PlanWorkload

__all__ = ["Option", "SearchStats", "search", "model_space", "torchrec_space", "to_plan", "trec_planner_plan", "MAX_GRID"]

MAX_GRID = 10_000  # TorchRec's proposers.MAX_PROPOSALS: the grid search runs only at or below this many proposals
_DEVICE, _HOST, _UNIFORM = ("table_wise", "column_wise"), ("table_row_wise",), ("row_wise", "data_parallel")


@dataclass(frozen=True)
class Option:
    """One sharding option of a table: per shard its perf parts (fwd_compute, fwd_comms, bwd_compute, bwd_comms,
    prefetch_compute), its storage (hbm, ddr) and its block (row_start, rows, col_start, cols)."""

    table: str
    sharding_type: str
    kernel: str
    perf: tuple[tuple[float, float, float, float, float], ...]
    storage: tuple[tuple[int, int], ...]
    blocks: tuple[tuple[int, int, int, int], ...]
    cache_fraction: float = 0.0

    def total(self, i: int) -> float:  # Perf.total's order of summation
        f, fc, b, bc, p = self.perf[i]
        return f + b + fc + bc + p

    @property
    def depth(self) -> float:
        return max(self.total(i) for i in range(len(self.perf)))

    @property
    def breadth(self) -> float:
        s = 0.0
        for i in range(len(self.perf)):
            s += self.total(i)
        return s


@dataclass
class SearchStats:
    proposals: int = 0  # distinct proposals partitioned (TorchRec's num_proposals)
    plans: int = 0  # of which fitted
    cache_hits: int = 0
    sequence: int = 0  # proposals in TorchRec's whole sequence, repeats included
    work: int = 0  # shards placed (each partition places every shard of its proposal once, at most)
    cut: list[str] = field(default_factory=list)  # proposers whose sequence the budget ended early
    per_proposer: dict[str, int] = field(default_factory=dict)
    rating: float = math.inf
    best_proposer: str = ""


@dataclass
class _Terms:
    """Per option the sort keys the proposers read: depth, breadth, the greedy proposer's storage key; from
    `Option`'s properties (reference) or computed once per search from the space's arrays (`option_terms`)."""

    depth: Any = lambda o: o.depth
    breadth: Any = lambda o: o.breadth
    storage: Any = None

    def __post_init__(self) -> None:
        if self.storage is None:
            self.storage = _storage_key


def _sorted(opts: list[Option], key: Any) -> list[Option]:
    return sorted(opts, key=key)


def _storage_key(o: Option) -> tuple[float, float, float, float]:
    return (max(h for h, _ in o.storage), sum(h for h, _ in o.storage),
            max(d for _, d in o.storage), sum(d for _, d in o.storage))


def _greedy(by_table: dict[str, list[Option]], key: Any, terms: _Terms):  # noqa: ANN202
    opts = {k: _sorted(v, key) for k, v in by_table.items()}
    keys = {k: [terms.storage(o) for o in v] for k, v in opts.items()}  # once per option, not per proposal
    cur = dict.fromkeys(opts, 0)
    while True:
        yield [opts[k][i] for k, i in cur.items()]
        largest, best = None, (0, 0, 0, 0)
        for k, i in cur.items():
            if i + 1 < len(opts[k]):
                s = keys[k][i]
                if s > best:
                    largest, best = k, s
        if largest is None:
            return
        cur[largest] += 1


def _uniform(space: list[Option], terms: _Terms):  # noqa: ANN202
    tables = list(dict.fromkeys(o.table for o in space))
    by_type: dict[str, dict[str, list[Option]]] = {}
    for o in space:
        by_type.setdefault(o.sharding_type, {}).setdefault(o.table, []).append(o)
    for per_table in by_type.values():
        if per_table.keys() == set(tables):
            yield [_sorted(v, terms.depth)[0] for v in per_table.values()]


def _grid(by_table: dict[str, list[Option]], terms: _Terms):  # noqa: ANN202
    if math.prod(len(v) for v in by_table.values()) > MAX_GRID:
        return
    opts = [_sorted(v, terms.depth) for v in by_table.values()]
    for idx in itertools.product(*(range(len(v)) for v in opts)):
        yield [v[i] for v, i in zip(opts, idx, strict=True)]


class _Dev:
    __slots__ = ("rank", "hbm", "ddr", "perf", "key")

    def __init__(self, rank: int, hbm: int, ddr: int) -> None:
        self.rank, self.hbm, self.ddr, self.perf = rank, hbm, ddr, [0.0] * 5

    def total(self) -> float:
        f, fc, b, bc, p = self.perf
        return f + b + fc + bc + p

    def fits(self, s: tuple[int, int]) -> bool:
        return s[0] <= self.hbm and s[1] <= self.ddr

    def take(self, s: tuple[int, int], p: tuple[float, ...]) -> None:
        self.hbm -= s[0]
        self.ddr -= s[1]
        for j in range(5):
            self.perf[j] += p[j]


class _Heap:
    """`OrderedDeviceHardware` in a heap: (perf total, local rank, rank)."""
    __slots__ = ("dev", "local")

    def __init__(self, dev: _Dev, local: int) -> None:
        self.dev, self.local = dev, local

    def __lt__(self, other: _Heap) -> bool:
        a, b = self.dev, other.dev
        return (a.total(), a.rank % self.local, a.rank) < (b.total(), b.rank % self.local, b.rank)


def partition(proposal: list[Option], capacity: list[tuple[int, int]], local: int) -> list[list[int]] | None:
    """`GreedyPerfPartitioner.partition` (sort by storage): the rank of each shard of each option, or None where
    TorchRec raises a PlannerError."""
    devs = [_Dev(r, h, d) for r, (h, d) in enumerate(capacity)]
    ranks: list[list[int]] = [[-1] * len(o.storage) for o in proposal]
    group = max(1, local)
    hosts = [devs[i * group:(i + 1) * group] for i in range(len(devs) // group)]
    for k, o in enumerate(proposal):  # uniform first
        if o.sharding_type in _UNIFORM:
            if len(o.storage) != len(devs):
                return None
            for i, d in enumerate(devs):
                if not d.fits(o.storage[i]):
                    return None
                d.take(o.storage[i], o.perf[i])
                ranks[k][i] = d.rank
    rest = [k for k, o in enumerate(proposal) if o.sharding_type not in _UNIFORM]
    totals = {k: (sum(h for h, _ in proposal[k].storage), sum(d for _, d in proposal[k].storage)) for k in rest}
    rest.sort(key=lambda k: totals[k], reverse=True)  # stable, as list.sort(reverse=True)
    heap: list[_Heap] | None = None
    for k in rest:
        o = proposal[k]
        if o.sharding_type in _HOST:
            heap = None
            if not _cohost(o, k, hosts, totals[k], ranks):
                return None
            continue
        if heap is None:
            heap = [_Heap(d, local) for d in devs]
            heapq.heapify(heap)
        limit = len(heap) * 0.25
        for i, s in enumerate(o.storage):
            tmp = []
            while heap:
                top = heap[0]
                if top.dev.fits(s):
                    ranks[k][i] = top.dev.rank
                    top.dev.take(s, o.perf[i])
                    heapq.heapreplace(heap, top)
                    break
                heapq.heappop(heap)
                tmp.append(top)
            else:
                return None
            if tmp:
                if len(tmp) <= limit:
                    for t in tmp:
                        heapq.heappush(heap, t)
                else:
                    heap.extend(tmp)
                    heapq.heapify(heap)
    return ranks


def _cohost(o: Option, k: int, hosts: list[list[_Dev]], total: tuple[int, int], ranks: list[list[int]]) -> bool:
    def perf_sum(host: list[_Dev]) -> float:
        s = 0
        for d in host:
            s += d.total()
        return s

    for host in sorted(hosts, key=perf_sum):
        if not (total[0] <= sum(d.hbm for d in host) and total[1] <= sum(d.ddr for d in host)):
            continue
        if len(o.storage) != len(host) or not all(d.fits(s) for d, s in zip(host, o.storage, strict=True)):
            continue
        for i, d in enumerate(host):
            d.take(o.storage[i], o.perf[i])
            ranks[k][i] = d.rank
        return True
    return False


def _rating(proposal: list[Option], ranks: list[list[int]], world: int) -> float:
    perfs = [0.0] * world
    for o, rs in zip(proposal, ranks, strict=True):
        for i, r in enumerate(rs):
            perfs[r] += o.total(i)
    return max(perfs)


class _Arrays:
    """The space as arrays for `partition_rate`, built once per search: per option its kind, its shards' span
    (`start`) and its summed storage (as `partition` sums it); per shard its perf parts, storage and total."""

    def __init__(self, space: list[Option], capacity: list[tuple[float, float]], local: int) -> None:
        self.index = {id(o): j for j, o in enumerate(space)}
        self.kind = np.array([UNIFORM if o.sharding_type in _UNIFORM else HOST if o.sharding_type in _HOST
                              else DEVICE for o in space], np.int64)
        self.start = np.zeros(len(space) + 1, np.int64)
        self.start[1:] = np.cumsum([len(o.storage) for o in space])
        n = int(self.start[-1])
        chain = itertools.chain.from_iterable
        self.perf = np.fromiter(chain(chain(o.perf for o in space)), np.float64, 5 * n).reshape(-1, 5)
        self.stor = np.fromiter(chain(chain(o.storage for o in space)), np.float64, 2 * n).reshape(-1, 2)
        p = self.perf  # `Option.total`'s order, shard by shard
        self.tot = p[:, 0] + p[:, 2] + p[:, 1] + p[:, 3] + p[:, 4]
        self.per_option = option_terms(self.start, self.tot, self.stor)  # depth, breadth, storage key
        self.sums = np.ascontiguousarray(self.per_option[:, [3, 5]])  # summed (hbm, ddr), as `partition` sums
        self.cap = np.array(capacity, np.float64).reshape(-1, 2)
        self.local = local
        self.ranks = np.full(len(self.tot), -1, np.int64)

    def terms(self) -> _Terms:
        rows, index = self.per_option.tolist(), self.index
        keys = [tuple(r[2:]) for r in rows]
        return _Terms(lambda o: rows[index[id(o)]][0], lambda o: rows[index[id(o)]][1],
                      lambda o: keys[index[id(o)]])

    def partition_rate(self, proposal: list[Option]) -> float | None:
        """`partition` and `_rating` of `proposal` (compiled): its rating, or None where it does not fit; its
        ranks are read by `ranks_of` (only the best proposal's)."""
        prop = np.array([self.index[id(o)] for o in proposal], np.int64)
        ok, rating = partition_rate(prop, self.kind, self.start, self.perf, self.stor, self.tot, self.sums,
                                    self.cap, self.local, self.ranks)
        return float(rating) if ok else None

    def rate_all(self, props: np.ndarray) -> tuple[list[bool], list[float]]:
        """`partition_rate` of each row of `props` (option indices) in one compiled call: fits, ratings."""
        ok, rating = partition_rate_all(props, self.kind, self.start, self.perf, self.stor, self.tot, self.sums,
                                        self.cap, self.local, self.ranks)
        return ok.tolist(), rating.tolist()

    def ranks_of(self, proposal: list[Option]) -> list[list[int]]:
        """The ranks of the proposal `partition_rate` placed last."""
        start, ranks = self.start, self.ranks
        return [ranks[start[j]:start[j + 1]].tolist() for j in (self.index[id(o)] for o in proposal)]


def search(space: list[Option], capacity: list[tuple[float, float]], local: int, budget: int | None = None,
           stats: SearchStats | None = None, reference: bool = False) -> tuple[list[Option], list[list[int]]] | None:
    """TorchRec's planner search over `space` (options in enumeration order) on ranks with `capacity` (hbm, ddr
    left after its reservation) in hosts of `local`: the best proposal and its shards' ranks, or None where no
    proposal fits. `budget` (counted work; TorchRec has an optional wall-clock timeout instead): each proposer
    partitions new proposals while the shards they place, summed, stay within this. Proposals are placed and
    rated by the compiled `partition_rate` (the same ranks and floats); `reference`: by the Python `partition`
    and `_rating` (tests check the two agree)."""
    stats = stats if stats is not None else SearchStats()
    fast = None if reference or local < 1 or not space else _Arrays(space, capacity, local)
    if fast is not None and not np.isnan(fast.per_option).any():  # NaN keys sort apart in Python and numpy
        return _search_rows(space, fast, budget, stats)
    by_table: dict[str, list[Option]] = {}
    for o in space:
        by_table.setdefault(o.table, []).append(o)
    terms = _Terms() if fast is None else fast.terms()
    proposers = [("grid", _grid(by_table, terms)), ("greedy", _greedy(by_table, terms.depth, terms)),
                 ("greedy-breadth", _greedy(by_table, terms.breadth, terms)), ("uniform", _uniform(space, terms))]
    seen: set[frozenset[int]] = set()
    best: tuple[list[Option], list[list[int]]] | None = None
    for name, gen in proposers:
        work = 0
        for proposal in gen:
            stats.sequence += 1
            key = frozenset(map(id, proposal))
            if key in seen:
                stats.cache_hits += 1
                continue
            shards = sum(len(o.storage) for o in proposal)
            if budget is not None and work + shards > budget:
                stats.cut.append(name)
                break
            seen.add(key)
            stats.proposals += 1
            stats.per_proposer[name] = stats.per_proposer.get(name, 0) + 1
            work += shards
            stats.work += shards
            if fast is None:
                ranks = partition(proposal, capacity, local)
                if ranks is None:
                    continue
                r = _rating(proposal, ranks, len(capacity))
            else:
                r = fast.partition_rate(proposal)
                if r is None:
                    continue
            stats.plans += 1
            if r < stats.rating:
                ranks = ranks if fast is None else fast.ranks_of(proposal)
                stats.rating, stats.best_proposer, best = r, name, (proposal, ranks)
    return best


def _index_proposers(space: list[Option], fast: _Arrays) -> list[tuple[str, np.ndarray]]:
    """The proposers' sequences (`_grid`, `_greedy` by depth and by breadth, `_uniform`) as rows of option
    indices, whole: none reads a rating, so the sequence is fixed before any proposal is placed. Per table its
    options sorted as `_sorted` sorts them (np.lexsort is stable: ties keep the space's order)."""
    table_of = {t: k for k, t in enumerate(dict.fromkeys(o.table for o in space))}
    table = np.array([table_of[o.table] for o in space], np.int64)
    tstart = np.zeros(len(table_of) + 1, np.int64)
    tstart[1:] = np.cumsum(np.bincount(table, minlength=len(table_of)))
    keys = np.ascontiguousarray(fast.per_option[:, 2:])
    depth, breadth = (np.lexsort((fast.per_option[:, c], table)) for c in (0, 1))
    by_depth = [depth[tstart[k]:tstart[k + 1]].tolist() for k in range(len(table_of))]
    n = len(by_depth)
    grid = np.array(list(itertools.product(*by_depth)) if math.prod(map(len, by_depth)) <= MAX_GRID else [],
                    np.int64).reshape(-1, n)
    return [("grid", grid), ("greedy", greedy_sequence(tstart, depth, keys)),
            ("greedy-breadth", greedy_sequence(tstart, breadth, keys)),
            ("uniform", _uniform_rows(space, fast.per_option[:, 0].tolist(), n))]


def _uniform_rows(space: list[Option], depth: list[float], n: int) -> np.ndarray:
    """`_uniform`'s proposals as rows of option indices: for each sharding type every table has (in order of
    first appearance), each table's first option of the least depth."""
    by_type: dict[str, dict[str, list[int]]] = {}
    for j, o in enumerate(space):
        by_type.setdefault(o.sharding_type, {}).setdefault(o.table, []).append(j)
    tables = {o.table for o in space}
    rows = [[min(v, key=depth.__getitem__) for v in per_table.values()]
            for per_table in by_type.values() if per_table.keys() == tables]
    return np.array(rows, np.int64).reshape(-1, n)


def _search_rows(space: list[Option], fast: _Arrays, budget: int | None,
                 stats: SearchStats) -> tuple[list[Option], list[list[int]]] | None:
    """`search`'s loop on the proposers' whole sequences as index rows (`_index_proposers`), the new proposals
    within budget placed and rated in one compiled call: the proposer loop's per-proposal Python (option lists,
    frozensets of ids, one kernel call each) was most of the search's time on small instances (f88). A
    proposal's key is its sorted option indices (the set of options, as the frozenset of ids); the best is the
    first of the least rating, its ranks placed again (the same ranks: `partition_rate` is deterministic)."""
    counts = np.diff(fast.start)
    parts: list[np.ndarray] = []
    owner: list[str] = []
    seen: set[bytes] = set()
    for name, seq in _index_proposers(space, fast):
        new, cut = _new_within(map(bytes, np.sort(seq, axis=1)), counts[seq].sum(axis=1).tolist(), seen, budget,
                               stats)
        if cut:
            stats.cut.append(name)
        if new:
            stats.per_proposer[name] = stats.per_proposer.get(name, 0) + len(new)
            parts.append(seq[new])
            owner += [name] * len(new)
    if not owner:
        return None
    props = np.concatenate(parts)
    fits, ratings = fast.rate_all(props)
    best = -1
    for i, (ok, r) in enumerate(zip(fits, ratings, strict=True)):
        if ok:
            stats.plans += 1
            if r < stats.rating:
                stats.rating, stats.best_proposer, best = r, owner[i], i
    if best < 0:
        return None
    proposal = [space[j] for j in props[best].tolist()]
    fast.partition_rate(proposal)
    return proposal, fast.ranks_of(proposal)


def _new_within(keys: Iterable[bytes], shards: list[int], seen: set[bytes], budget: int | None,
                stats: SearchStats) -> tuple[list[int], bool]:
    """One proposer's new proposals (indices in its sequence) while their shards, summed, stay within `budget`,
    and whether the budget ended its sequence; `search`'s counts (sequence, cache hits, proposals, work) kept
    in locals and added once (a small instance's search visits ~200 proposals)."""
    new: list[int] = []
    work = visited = hits = 0
    cut = False
    for i, (key, shard) in enumerate(zip(keys, shards, strict=True)):
        visited += 1
        if key in seen:
            hits += 1
            continue
        if budget is not None and work + shard > budget:
            cut = True
            break
        seen.add(key)
        work += shard
        new.append(i)
    stats.sequence += visited
    stats.cache_hits += hits
    stats.proposals += len(new)
    stats.work += work
    return new, cut


def to_plan(best: tuple[list[Option], list[list[int]]], topo: Topology) -> ShardingPlan:
    """The search's best proposal as our plan."""
    slow = topo.tiers[min(1, len(topo.tiers) - 1)].name
    tables = {}
    for o, rs in zip(*best, strict=True):
        st = ShardingType(o.sharding_type)
        tier = topo.fast.name if o.kernel in ("fused", "dense") else slow
        shards = tuple(Shard(r, r0, r0 + n, c0, c0 + m, tier, o.cache_fraction)
                       for r, (r0, n, c0, m) in zip(rs, o.blocks, strict=True))
        tables[o.table] = TablePlan(o.table, st, shards)
    return ShardingPlan(topo.world_size, tables)


def model_space(cost: Any, trec: Any) -> tuple[list[Option], list[tuple[float, float]], int]:
    """TorchRec's search space built from our models: its enumeration (per table, in table order: column-wise in
    its column blocks (`torchrec_column_pieces`), data-parallel, row-wise over all ranks, table-row-wise over a
    host, table-wise; kernels fused, fused_uvm, fused_uvm_caching (load factor 0.2, TorchRec's default) where
    there is a slow tier, dense for data-parallel), each shard's perf by `TorchRecCostModel` (TorchRec's
    estimator, to 1e-9) and its memory by our `CostModel.shard_memory` (TorchRec's storage estimator within a
    few % per shard: buffers are counted differently); per-rank capacity from our topology (`cost.topology`,
    inputs reserved). Once per `optimize` (small instances): each layout's runs found once for its kernels."""
    topo, workload = cost.topology, cost.workload
    fast = topo.fast.name
    slow = topo.tiers[1].name if len(topo.tiers) > 1 and topo.device == "cuda" else None
    W, H = topo.world_size, min(topo.ranks_per_host, topo.world_size)
    fused = [("fused", fast, 0.0)] + ([("fused_uvm", slow, 0.0), ("fused_uvm_caching", slow, 0.2)] if slow else [])
    dense = [("dense", fast, 0.0)]
    out: list[Option] = []
    for t in workload.tables:
        for st, blocks in _layouts(t, W, H):
            # both models' terms of a shard depend on its size alone, and a layout's blocks come in runs of one
            # size (RW: at most two runs, DP: one): each run priced once (f5: 1,841 of 6,343 shards)
            runs = [(rows, cols, sum(1 for _ in run)) for (rows, cols), run in
                    itertools.groupby(blocks, operator.itemgetter(1, 3))]
            name, blocks = st.value, tuple(blocks)
            for kernel, tier, cf in dense if st == ShardingType.DATA_PARALLEL else fused:
                perf, storage = [], []
                for rows, cols, n in runs:
                    c = trec.shard_cost(t, st, rows, cols, tier, cf)
                    m = cost.shard_memory(t, st, rows, cols, tier, cf)
                    perf += [(c.fwd_compute, c.fwd_comms, c.bwd_compute, c.bwd_comms, c.optimizer)] * n
                    storage += [(m.get(fast, 0.0), m.get(slow, 0.0) if slow else 0.0)] * n
                out.append(Option(t.name, name, kernel, tuple(perf), tuple(storage), blocks, cf))
    capacity = [(topo.usable(fast), topo.usable(slow) if slow else 0.0)] * W
    return out, capacity, H


def _layouts(t: Any, W: int, H: int) -> list[tuple[ShardingType, list[tuple[int, int, int, int]]]]:
    """TorchRec's layouts of table `t` in its enumeration order, each as (type, blocks (row start, rows, column
    start, columns)): column-wise in its column blocks, data-parallel, row-wise over all W ranks, table-row-wise
    over a host of H, table-wise."""
    n_cw = torchrec_column_pieces(t.dim)
    width = t.dim // n_cw
    rw, twrw = row_ranges(t.rows, W), row_ranges(t.rows, H)
    return [(ShardingType.COLUMN_WISE, [(0, t.rows, i * width, width) for i in range(n_cw)]),
            (ShardingType.DATA_PARALLEL, [(0, t.rows, 0, t.dim)] * W),
            (ShardingType.ROW_WISE, [(a, b - a, 0, t.dim) for a, b in rw]),
            (ShardingType.TABLE_ROW_WISE, [(a, b - a, 0, t.dim) for a, b in twrw]),
            (ShardingType.TABLE_WISE, [(0, t.rows, 0, t.dim)])]


def torchrec_space(workload: PlanWorkload, topo: Topology) -> tuple[list[Option], list[tuple[int, int]], int]:
    """TorchRec's own search space (its `EmbeddingEnumerator` with the constraints `run_torchrec_planner` passes)
    and the per-rank (hbm, ddr) its storage reservation leaves, and the local world size."""
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator

    from sharding.torchrec_adapter import (
        _reservation,
        _sharders,
        embedding_module,
        to_constraints,
        torchrec_topology,
    )

    trec_topo = torchrec_topology(topo)
    constraints = to_constraints(workload, topo)
    module, sharders = embedding_module(workload), _sharders(workload)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reserved = _reservation(topo, workload).reserve(topology=trec_topo, batch_size=workload.batch_size,
                                                        module=module, sharders=sharders, constraints=constraints)
        enum = EmbeddingEnumerator(topology=trec_topo, batch_size=workload.batch_size, constraints=constraints)
        space = enum.enumerate(module, sharders)
    out = []
    for so in space:
        cf = 0.0
        if so.compute_kernel == "fused_uvm_caching":
            cf = so.cache_params.load_factor if so.cache_params and so.cache_params.load_factor else 0.2
        out.append(Option(
            so.name, so.sharding_type, so.compute_kernel,
            tuple((s.perf.fwd_compute, s.perf.fwd_comms, s.perf.bwd_compute, s.perf.bwd_comms,
                   s.perf.prefetch_compute) for s in so.shards),
            tuple((s.storage.hbm, s.storage.ddr) for s in so.shards),
            tuple((s.offset[0], s.size[0], s.offset[1], s.size[1]) for s in so.shards), cf))
    capacity = [(d.storage.hbm, d.storage.ddr) for d in reserved.devices]
    return out, capacity, trec_topo.local_world_size


def trec_planner_plan(workload: PlanWorkload, topo: Topology, budget: int | None = None,
                      stats: SearchStats | None = None) -> ShardingPlan | None:
    """TorchRec's planner re-stated over TorchRec's own search space (`torchrec_space`)."""
    space, capacity, local = torchrec_space(workload, topo)
    best = search(space, capacity, local, budget, stats)
    if best is None:
        return None
    plan = to_plan(best, topo)
    plan.optimizer = "torchrec-search"
    return plan
