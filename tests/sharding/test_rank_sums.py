"""Rating a plan with the compiled sums (`sharding.rank_sums`) gives bitwise the figures of the loop it replaced (one
numpy add per shard shape, `np.add.at` where a rank repeats), so ratings and plans do not change."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from sharding import CostModel, PlanWorkload, load_topology, optimize
from sharding.baselines import BASELINES
from sharding.layouts import table_plan
from sharding.plan import ShardingPlan, ShardingType
from sharding.rank_sums import SPAN_MIN, RankSums, add_terms
from sharding.tablesets import load_tables
from sharding.trec_cost import TorchRecCostModel

TW, RW, CW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.ROW_WISE, ShardingType.COLUMN_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)


def _adder(where: list[int]) -> Callable[[np.ndarray, float], None]:
    """The former per-shape add (sharding/cost.py before the compiled sums)."""
    if len(where) == 1:
        r = where[0]

        def one(a: np.ndarray, x: float) -> None:
            a[r] += x
        return one
    if where == list(range(where[0], where[0] + len(where))):
        idx: slice | np.ndarray = slice(where[0], where[0] + len(where))
    elif len(set(where)) == len(where):
        idx = np.array(where)
    else:
        rep = np.array(where)
        return lambda a, x: np.add.at(a, rep, x)

    def block(a: np.ndarray, x: float) -> None:
        a[idx] += x
    return block


def _former_accumulate(cost: CostModel, plan: ShardingPlan, memory: bool) -> tuple:
    """`CostModel._accumulate` as it was: one add per shard shape and term, in table order."""
    w = plan.world_size
    coll: dict = {}
    held: dict = {}
    parts = np.zeros((3, w))
    rows3 = tuple(parts)
    count = np.zeros(w, dtype=np.int64)
    mem = {t.name: np.zeros(w) for t in cost.topology.tiers}
    for tp in plan.tables.values():
        t, st = cost.tables[tp.name], tp.sharding_type
        group = held.setdefault(st, set())
        for (rows, cols, tier, cf), where in tp.alike().items():
            add = _adder(where)
            c = cost.shard_cost(t, st, rows, cols, tier, cf)
            for a, x in zip(rows3, (c.fwd_compute, c.bwd_compute, c.optimizer), strict=True):
                add(a, x)
            add(count, 1)
            group.update(where)
            for p, op, secs in cost.message_times(t, st, rows, cols):
                if (st, p, op) not in coll:
                    coll[(st, p, op)] = np.zeros(w)
                add(coll[(st, p, op)], secs)
            if memory:
                for k, v in cost.shard_memory(t, st, rows, cols, tier, cf).items():
                    add(mem.setdefault(k, np.zeros(w)), v)
    return parts, count, coll, held, mem


def _former_rank_loads(trec: TorchRecCostModel, plan: ShardingPlan) -> np.ndarray:
    loads = np.zeros(plan.world_size)
    for tp in plan.tables.values():
        t = trec.tables[tp.name]
        for (rows, cols, tier, cf), where in tp.alike().items():
            _adder(where)(loads, trec.shard_cost(t, tp.sharding_type, rows, cols, tier, cf).total)
    return loads


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _plans() -> tuple[PlanWorkload, object, list[ShardingPlan]]:
    wl = PlanWorkload(load_tables("random:40:3"), 2048, "train")
    topo = load_topology("torchrec_default", 16)  # two hosts: table-row-wise groups, inter-host collectives
    plans = [optimize(wl, topo), *(fn(wl, topo) for fn in BASELINES.values())]
    t = {x.name: x for x in wl.tables}
    mixed = {  # every type, a cached shard in the slow tier, repeated and scattered ranks
        "t0": table_plan(t["t0"], DP, list(range(16)), "hbm"),
        "t1": table_plan(t["t1"], RW, [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3], "hbm"),
        "t2": table_plan(t["t2"], TWRW, [8, 9, 10, 11, 12, 13, 14, 15], "hbm"),
        "t3": table_plan(t["t3"], CW, [0, 7, 7, 2], "hbm"),
        "t4": table_plan(t["t4"], TW, [5], "ddr", 0.25),
        "t5": table_plan(t["t5"], DP, [0, 0, 2, 4], "hbm"),
    }
    mixed.update({x.name: table_plan(x, TW, [i % 16], "hbm") for i, x in enumerate(wl.tables) if x.name not in mixed})
    plans.append(ShardingPlan(16, mixed))
    return wl, topo.reserve_inputs(wl.ids_per_batch), plans


@pytest.mark.parametrize("memory", [False, True])
def test_the_cost_models_sums_are_the_former_per_shape_adds_bit_for_bit(memory: bool) -> None:
    wl, topo, plans = _plans()
    for plan in plans:
        cost = CostModel(wl, topo)
        parts, count, coll, held, mem = cost._accumulate(plan, memory)
        parts0, count0, coll0, held0, mem0 = _former_accumulate(CostModel(wl, topo), plan, memory)
        assert _bits(parts) == _bits(parts0) and count.dtype == count0.dtype and _bits(count) == _bits(count0)
        assert list(coll) == list(coll0) and all(_bits(coll[k]) == _bits(coll0[k]) for k in coll0)
        assert held == held0
        assert list(mem) == list(mem0) and all(_bits(mem[k]) == _bits(mem0[k]) for k in mem0)
        assert any(m.any() for m in mem.values()) == memory


def test_torchrecs_rank_loads_are_the_former_per_shape_adds_bit_for_bit() -> None:
    wl, topo, plans = _plans()
    for plan in plans:
        trec = TorchRecCostModel(wl, topo)
        assert _bits(trec.rank_loads(plan)) == _bits(_former_rank_loads(TorchRecCostModel(wl, topo), plan))


def test_the_compiled_sums_add_each_term_in_order_and_once_per_listed_rank() -> None:
    rng = np.random.default_rng(0)
    sums, expect = RankSums(), np.zeros((5, 7))
    for _ in range(200):
        at = tuple(int(q) for q in rng.integers(0, 5, rng.integers(1, 4)))
        vals = tuple(float(x) for x in rng.standard_normal(len(at)) * 10.0 ** rng.integers(-8, 8, len(at)))
        where = [int(r) for r in rng.integers(0, 7, rng.integers(1, 9))]
        sums.groups.append((at, vals, where))
        for q, x in zip(at, vals, strict=True):
            _adder(where)(expect[q], x)
    assert _bits(sums.total(5, 7)) == _bits(expect)



def test_runs_of_consecutive_ranks_are_added_as_listed_ranks_are() -> None:
    """`RankSums.total` passes a shape on ≥ `SPAN_MIN` consecutive ranks in order as (first, count): the same sums
    bit for bit as its ranks listed one by one, and only for such runs (a repeat, a gap, another order or a
    short list goes rank by rank)."""
    rng = np.random.default_rng(1)
    w = 80
    for _ in range(20):
        sums, expect = RankSums(), np.zeros((5, w))
        for _ in range(60):
            at = tuple(int(q) for q in rng.integers(0, 5, rng.integers(1, 4)))
            vals = tuple(float(x) for x in rng.standard_normal(len(at)) * 10.0 ** rng.integers(-8, 8, len(at)))
            first = int(rng.integers(0, w - SPAN_MIN + 1))
            run = list(range(first, int(rng.integers(first + SPAN_MIN, w + 1))))
            kind = int(rng.integers(0, 6))
            if kind == 1:  # a rank twice
                run[int(rng.integers(1, len(run)))] = run[0]
            elif kind == 2:  # a gap
                run = run[:-1] + [run[-1] + 1] if run[-1] + 1 < w else run[1:] + [run[0]]
            elif kind == 3:  # another order
                run = [int(r) for r in rng.permutation(run)]
            elif kind == 4:  # short
                run = run[:int(rng.integers(1, SPAN_MIN))]
            sums.groups.append((at, vals, run))
            for q, x in zip(at, vals, strict=True):
                _adder(run)(expect[q], x)
        assert _bits(sums.total(5, w)) == _bits(expect)


def test_the_cost_models_sums_on_runs_of_ranks_are_the_former_adds_bit_for_bit() -> None:
    """As above on 64 ranks, where replicas and row-wise blocks over all ranks go to the kernel as runs."""
    wl = PlanWorkload(load_tables("random:40:5"), 512, "train")
    topo = load_topology("torchrec_default", 64, 8).reserve_inputs(wl.ids_per_batch)
    t = {x.name: x for x in wl.tables}
    rng = np.random.default_rng(2)
    types = [DP, RW, TWRW, CW, TW]
    plans = [fn(wl, topo) for fn in BASELINES.values()]
    for _ in range(3):
        tables = {}
        for x in wl.tables:
            st = types[int(rng.integers(0, len(types)))]
            ranks = {DP: list(range(64)), RW: [int(r) for r in rng.permutation(64)] if rng.random() < 0.3 else
                     list(range(64)), TWRW: list(range(8, 16)), CW: [3, 3, 40, 63], TW: [int(rng.integers(0, 64))]}
            tables[x.name] = table_plan(t[x.name], st, ranks[st], "hbm")
        plans.append(ShardingPlan(64, tables))
    for plan in plans:
        for memory in (False, True):
            parts, count, coll, held, mem = CostModel(wl, topo)._accumulate(plan, memory)
            parts0, count0, coll0, held0, mem0 = _former_accumulate(CostModel(wl, topo), plan, memory)
            assert _bits(parts) == _bits(parts0) and _bits(count) == _bits(count0)
            assert list(coll) == list(coll0) and all(_bits(coll[k]) == _bits(coll0[k]) for k in coll0)
            assert held == held0 and list(mem) == list(mem0) and all(_bits(mem[k]) == _bits(mem0[k]) for k in mem0)
        assert _bits(TorchRecCostModel(wl, topo).rank_loads(plan)) == _bits(
            _former_rank_loads(TorchRecCostModel(wl, topo), plan))


def _former_total(sums: RankSums, n_rows: int, world: int) -> np.ndarray:
    """`RankSums.total` before its integers were packed in one array: eight arrays for `add_terms`."""
    from itertools import chain
    from operator import itemgetter

    def offsets(seqs: list, n: int) -> np.ndarray:
        out = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, seqs), np.int64, n), out=out[1:])
        return out

    g, n = sums.groups, len(sums.groups)
    at, vals, where = (list(map(itemgetter(i), g)) for i in range(3))
    every = list(range(world))
    span = [k if k >= SPAN_MIN and x == every[x[0]:x[0] + k] else 0 for x, k in zip(where, map(len, where), strict=True)]
    listed = [() if k else x for x, k in zip(where, span, strict=True)]
    out = np.zeros((n_rows, world))
    add_terms(out, np.fromiter(chain.from_iterable(at), np.int64), np.fromiter(chain.from_iterable(vals), np.float64),
              offsets(at, n), np.fromiter(chain.from_iterable(listed), np.int64), offsets(listed, n),
              np.fromiter([x[0] if k else 0 for x, k in zip(where, span, strict=True)], np.int64, n),
              np.array(span, dtype=np.int64))
    return out


@pytest.mark.parametrize("world", [1, 7, SPAN_MIN - 1, SPAN_MIN, 80])
def test_packed_sums_are_the_former_eight_array_sums_bit_for_bit(world: int) -> None:
    """`RankSums.total` (one packed int array, `add_packed`; below `SPAN_MIN` ranks no run check) against the
    former eight-array `add_terms` call: random shapes (several rows each, repeated and scattered ranks, runs of
    consecutive ranks, tuples and lists, empty rank lists), and no shape at all."""
    rng = np.random.default_rng(world)
    for case in range(30):
        sums = RankSums()
        for _ in range(int(rng.integers(0, 40)) if case else 0):
            at = tuple(int(q) for q in rng.integers(0, 5, rng.integers(1, 5)))
            vals = tuple(float(x) for x in rng.standard_normal(len(at)) * 10.0 ** rng.integers(-8, 8, len(at)))
            kind = int(rng.integers(0, 4))
            if kind == 0:  # a run, possibly long enough
                first = int(rng.integers(0, world))
                where = list(range(first, int(rng.integers(first, world + 1))))
            elif kind == 1:
                where = [int(r) for r in rng.integers(0, world, rng.integers(0, 2 * world + 2))]
            elif kind == 2:
                where = tuple(range(world))  # a tuple is never passed as a run
            else:
                where = list(range(world))
            sums.groups.append((at, vals, where))
        assert _bits(sums.total(5, world)) == _bits(_former_total(sums, 5, world))
