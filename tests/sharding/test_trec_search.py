"""`sharding.trec_search` against what it re-states: TorchRec 1.8's own planner (its default proposers and greedy
partitioner), run on small instances (it is slow), must return the very plan the re-statement returns."""
from __future__ import annotations

import pytest

from embedding.spec import PoolingSpec, TableSpec
from sharding import CostModel, PlanWorkload, validate_plan
from sharding.torchrec_adapter import run_torchrec_planner
from sharding.trec_cost import TorchRecCostModel
from sharding.trec_search import (
    Option,
    SearchStats,
    model_space,
    partition,
    search,
    to_plan,
    torchrec_space,
    trec_planner_plan,
)
from tests.sharding.conftest import topology

SMALL = [  # (rows, dim, pooling)
    [(1_000_000, 64, 4), (50_000, 128, 20), (300, 32, 1), (2_000_000, 16, 2)],
    [(3_000_000, 256, 30), (50_000, 128, 20), (300, 32, 1), (2_000_000, 16, 2), (10_000, 512, 5), (700_000, 64, 9)],
]


def _workload(i: int) -> PlanWorkload:
    return PlanWorkload(tuple(TableSpec(f"t{j}", r, d, pooling=PoolingSpec("fixed", p))
                              for j, (r, d, p) in enumerate(SMALL[i])), 512 * (i + 1))


@pytest.mark.parametrize("i, topo", [(0, topology(1, 2, 8.0)), (1, topology(2, 4, 8.0))])
def test_restated_search_returns_torchrecs_plan(i, topo) -> None:
    wl = _workload(i)
    theirs = run_torchrec_planner(wl, topo)
    stats = SearchStats()
    mine = trec_planner_plan(wl, topo, stats=stats)
    assert mine is not None and mine.tables == theirs.tables  # same types, kernels, blocks and ranks
    assert stats.proposals > 10 and not stats.cut
    # the same search over the space built from our models (TorchRec's perf re-stated, our shard memory) finds a
    # plan TorchRec's estimator rates the same
    rt = topo.reserve_inputs(wl.ids_per_batch)
    cost, trec = CostModel(wl, rt), TorchRecCostModel(wl, rt)
    space, capacity, local = model_space(cost, trec)
    best = search(space, capacity, local)
    assert best is not None
    ours = to_plan(best, rt)
    validate_plan(ours, wl, topo)
    assert trec.plan_cost(ours) == pytest.approx(trec.plan_cost(theirs), rel=1e-9)
    # model_space enumerates what TorchRec's enumerator enumerates (TorchRec's order of types and kernels comes
    # from iterating a set of strings, so it varies with PYTHONHASHSEED; ours is fixed), shard perf to 1e-9
    ts, _, _ = torchrec_space(wl, topo)
    assert sorted((o.table, o.sharding_type, o.kernel, o.blocks) for o in ts) == \
        sorted((o.table, o.sharding_type, o.kernel, o.blocks) for o in space)
    mine_perf = {(o.table, o.sharding_type, o.kernel): o.perf for o in space}
    for o in ts:
        assert [sum(p) for p in o.perf] == pytest.approx([sum(p) * 1e3 for p in mine_perf[o.table, o.sharding_type,
                                                                                             o.kernel]], rel=1e-9)


def test_budget_counts_shards_placed() -> None:
    wl = _workload(1)
    topo = topology(2, 4, 8.0)
    rt = topo.reserve_inputs(wl.ids_per_batch)
    space, capacity, local = model_space(CostModel(wl, rt), TorchRecCostModel(wl, rt))
    full, cut = SearchStats(), SearchStats()
    search(space, capacity, local, None, full)
    search(space, capacity, local, 40, cut)
    assert cut.cut and not full.cut
    assert cut.proposals < full.proposals and cut.work <= 40 * 4  # each of the 4 proposers within its budget
    assert cut.rating >= full.rating


def test_partition_places_as_torchrecs_greedy_partitioner() -> None:
    # two ranks in one host; a TW option of 3 shards' perf 3, 2, 1 by storage order; uniform first
    def opt(name: str, st: str, perfs: list[float], hbm: list[int]) -> Option:
        return Option(name, st, "fused", tuple((p, 0.0, 0.0, 0.0, 0.0) for p in perfs),
                      tuple((h, 0) for h in hbm), tuple((0, 1, 0, 1) for _ in perfs))
    rw = opt("r", "row_wise", [1.0, 1.0], [1, 1])
    a, b, c = opt("a", "table_wise", [3.0], [5]), opt("b", "table_wise", [2.0], [4]), opt("c", "table_wise", [1.0], [3])
    ranks = partition([c, rw, a, b], [(10, 0), (10, 0)], 2)
    # by storage, largest first: a onto rank 0 (tie: lower local rank), b onto rank 1, c onto rank 1 (3 < 4)
    assert ranks == [[1], [0, 1], [0], [1]]
    assert partition([c, rw, a, b], [(6, 0), (6, 0)], 2) is None  # c finds no room


def test_optimize_with_the_search_is_no_worse_on_both_models_than_its_plan() -> None:
    from sharding import optimize
    from sharding.optimizer import SEARCH_TAG, OptimizeStats
    wl, topo = _workload(1), topology(2, 4, 8.0)
    rt = topo.reserve_inputs(wl.ids_per_batch)
    cost, trec = CostModel(wl, rt), TorchRecCostModel(wl, rt)
    space, capacity, local = model_space(cost, trec)
    theirs = to_plan(search(space, capacity, local), rt)
    stats = OptimizeStats()
    ours = optimize(wl, topo, stats=stats, torchrec_search=30_000)
    validate_plan(ours, wl, topo)
    assert any(lab == SEARCH_TAG for lab, _, _ in stats.candidates) and stats.trec_search.proposals > 0
    tol = 1 + 1e-9
    assert cost.plan_cost(ours) <= cost.plan_cost(theirs) * tol and trec.plan_cost(ours) <= trec.plan_cost(theirs) * tol
    default = OptimizeStats()
    plain = optimize(wl, topo, stats=default)  # by default the search bounds the pick (step 5, `_bounded`)
    assert default.trec_search.proposals > 0
    assert cost.plan_cost(plain) <= cost.plan_cost(theirs) * tol and trec.plan_cost(plain) <= trec.plan_cost(theirs) * tol


@pytest.mark.parametrize("seed", [41, 80])
def test_default_plan_is_no_worse_on_both_models_than_torchrecs_search_on_family_instances(seed) -> None:
    """f41 (14 tables, 16 ranks) and f80 (99 tables, 8 ranks) of `sharding.family`: before the search bounded the
    pick, ours was 1.031× TorchRec's plan by our model on f41 and 1.051× by TorchRec's estimator on f80 (the
    re-stated search gives TorchRec's plan's ratings on both)."""
    from sharding import optimize
    from sharding.family import instance
    from sharding.optimizer import TREC_SEARCH_WORK
    inst = instance(seed)
    rt = inst.topology.reserve_inputs(inst.workload.ids_per_batch)
    cost, trec = CostModel(inst.workload, rt), TorchRecCostModel(inst.workload, rt)
    space, capacity, local = model_space(cost, trec)
    theirs = to_plan(search(space, capacity, local, TREC_SEARCH_WORK), rt)
    ours = optimize(inst.workload, inst.topology)
    validate_plan(ours, inst.workload, inst.topology)
    tol = 1 + 1e-9
    assert cost.plan_cost(ours) <= cost.plan_cost(theirs) * tol and trec.plan_cost(ours) <= trec.plan_cost(theirs) * tol


def _random_space(rng, world: int, local: int, tables: int) -> tuple[list[Option], list[tuple[float, float]]]:
    """Options of every kind (RW/DP over all ranks, TWRW over a host, TW, CW in 1-4 blocks), with small integer
    perf parts and storage where `rng` says so (ties in the heap, the sorts and the ratings), some with a wrong
    shard count (TorchRec's partitioner rejects those), capacity from ample to too small."""
    space = []
    for t in range(tables):
        for st, n in (("row_wise", world), ("data_parallel", world), ("table_row_wise", local),
                      ("table_wise", 1), ("column_wise", rng.randint(1, 4))):
            if rng.random() < 0.25:
                continue
            for kernel in ("fused", "fused_uvm")[:rng.randint(1, 2)]:
                m = n - 1 if n > 1 and rng.random() < 0.05 else n
                ints = rng.random() < 0.5
                val = (lambda hi: float(rng.randint(0, hi))) if ints else (lambda hi: rng.uniform(0, hi))
                perf = tuple(tuple(val(3) for _ in range(5)) for _ in range(m))
                storage = tuple((val(6), val(4) if kernel == "fused_uvm" else 0.0) for _ in range(m))
                space.append(Option(f"t{t}", st, kernel, perf, storage, tuple((0, 1, 0, 1) for _ in range(m))))
    cap = float(rng.choice([8, 15, 30, 200]))
    return space, [(cap, cap / 2)] * world


def _same_search(space, capacity, local, budget) -> SearchStats:
    fast, ref = SearchStats(), SearchStats()
    a = search(space, capacity, local, budget, fast)
    b = search(space, capacity, local, budget, ref, reference=True)
    assert fast == ref  # counts, rating, winning proposer
    assert (a is None) == (b is None)
    if a is not None:  # the same options (objects) and ranks
        assert [id(o) for o in a[0]] == [id(o) for o in b[0]] and a[1] == b[1]
    return fast


def test_compiled_search_agrees_with_the_python_partitioner_on_random_spaces() -> None:
    import random
    rng = random.Random(16)
    found = infeasible = 0
    for _ in range(60):
        local = rng.choice([1, 2, 4])
        world = local * rng.choice([1, 2, 3])
        space, capacity = _random_space(rng, world, local, rng.randint(1, 6))
        stats = _same_search(space, capacity, local, rng.choice([None, 60]))
        found += stats.plans > 0
        infeasible += stats.plans < stats.proposals
    assert found > 10 and infeasible > 10  # both outcomes exercised


def test_compiled_partition_agrees_with_the_python_one_proposal_by_proposal() -> None:
    import random

    from sharding.trec_search import _Arrays, _rating
    rng = random.Random(7)
    for _ in range(40):
        local = rng.choice([1, 2, 4])
        world = local * rng.choice([1, 2])
        space, capacity = _random_space(rng, world, local, 5)
        arrays = _Arrays(space, capacity, local)
        by_table: dict[str, list[Option]] = {}
        for o in space:
            by_table.setdefault(o.table, []).append(o)
        for _ in range(20):
            proposal = [rng.choice(v) for v in by_table.values()]
            ranks = partition(proposal, capacity, local)
            rating = arrays.partition_rate(proposal)
            assert rating == (None if ranks is None else _rating(proposal, ranks, world))
            if ranks is not None:
                assert arrays.ranks_of(proposal) == ranks


@pytest.mark.parametrize("seed", [41, 54, 80, 118])
def test_compiled_search_agrees_with_the_python_partitioner_on_family_instances(seed) -> None:
    """Admitted family instances (f54: no proposal of the search fits; the others: several do)."""
    from sharding.family import instance
    from sharding.optimizer import TREC_SEARCH_WORK
    inst = instance(seed)
    rt = inst.topology.reserve_inputs(inst.workload.ids_per_batch)
    space, capacity, local = model_space(CostModel(inst.workload, rt), TorchRecCostModel(inst.workload, rt))
    stats = _same_search(space, capacity, local, TREC_SEARCH_WORK)
    assert stats.proposals > 30 and (stats.plans > 0) == (seed != 54)


def _as_rows(proposals, space) -> list[list[int]]:
    index = {id(o): j for j, o in enumerate(space)}
    return [[index[id(o)] for o in p] for p in proposals]


def test_proposers_index_rows_are_the_python_proposers_sequences() -> None:
    """`_index_proposers` (grid, the compiled greedy by depth and by breadth, uniform: rows of option indices)
    against the Python generators on `Option`'s own terms, proposal by proposal: random spaces (ties in depth,
    breadth and storage keys; a third with the options shuffled, so tables interleave) and family instances;
    the shuffled spaces' whole searches against the Python partitioner too."""
    import random

    from sharding.family import instance
    from sharding.trec_search import _Arrays, _greedy, _grid, _index_proposers, _Terms, _uniform
    rng = random.Random(17)
    spaces, shuffled = [], 0
    for _ in range(60):
        local = rng.choice([1, 2, 4])
        world = local * rng.choice([1, 2, 3])
        space, capacity = _random_space(rng, world, local, rng.randint(1, 6))
        if rng.random() < 0.3:
            rng.shuffle(space)
            shuffled += 1
            _same_search(space, capacity, local, rng.choice([None, 60]))
        spaces.append((space, capacity, local))
    for seed in (41, 88, 118):
        inst = instance(seed)
        rt = inst.topology.reserve_inputs(inst.workload.ids_per_batch)
        spaces.append(model_space(CostModel(inst.workload, rt), TorchRecCostModel(inst.workload, rt)))
    lengths = {"grid": 0, "greedy": 0, "greedy-breadth": 0, "uniform": 0}
    for space, capacity, local in spaces:
        by_table: dict[str, list[Option]] = {}
        for o in space:
            by_table.setdefault(o.table, []).append(o)
        terms = _Terms()
        ref = {"grid": _grid(by_table, terms), "greedy": _greedy(by_table, terms.depth, terms),
               "greedy-breadth": _greedy(by_table, terms.breadth, terms), "uniform": _uniform(space, terms)}
        got = _index_proposers(space, _Arrays(space, capacity, local))
        assert [name for name, _ in got] == list(ref)
        for name, rows in got:
            assert rows.tolist() == _as_rows(ref[name], space), name
            lengths[name] += len(rows) > 1
    assert shuffled > 10 and min(lengths.values()) > 5  # every proposer exercised beyond one proposal


def _former_model_space(cost, trec) -> tuple:
    """`model_space` before its runs were found once per layout."""
    import itertools
    import operator

    from sharding.layouts import row_ranges, torchrec_column_pieces
    from sharding.plan import ShardingType
    topo, workload = cost.topology, cost.workload
    fast = topo.fast.name
    slow = topo.tiers[1].name if len(topo.tiers) > 1 and topo.device == "cuda" else None
    W, H = topo.world_size, min(topo.ranks_per_host, topo.world_size)
    out = []
    for t in workload.tables:
        n_cw = torchrec_column_pieces(t.dim)
        width = t.dim // n_cw
        rw, twrw = row_ranges(t.rows, W), row_ranges(t.rows, H)
        layouts = [(ShardingType.COLUMN_WISE, [(0, t.rows, i * width, width) for i in range(n_cw)]),
                   (ShardingType.DATA_PARALLEL, [(0, t.rows, 0, t.dim)] * W),
                   (ShardingType.ROW_WISE, [(a, b - a, 0, t.dim) for a, b in rw]),
                   (ShardingType.TABLE_ROW_WISE, [(a, b - a, 0, t.dim) for a, b in twrw]),
                   (ShardingType.TABLE_WISE, [(0, t.rows, 0, t.dim)])]
        for st, blocks in layouts:
            kernels = [("dense", fast, 0.0)] if st == ShardingType.DATA_PARALLEL else [("fused", fast, 0.0)] + (
                [("fused_uvm", slow, 0.0), ("fused_uvm_caching", slow, 0.2)] if slow else [])
            for kernel, tier, cf in kernels:
                perf, storage = [], []
                for (rows, cols), run in itertools.groupby(blocks, operator.itemgetter(1, 3)):
                    n = sum(1 for _ in run)
                    c = trec.shard_cost(t, st, rows, cols, tier, cf)
                    m = cost.shard_memory(t, st, rows, cols, tier, cf)
                    perf += [(c.fwd_compute, c.fwd_comms, c.bwd_compute, c.bwd_comms, c.optimizer)] * n
                    storage += [(m.get(fast, 0.0), m.get(slow, 0.0) if slow else 0.0)] * n
                out.append(Option(t.name, st.value, kernel, tuple(perf), tuple(storage), tuple(blocks), cf))
    capacity = [(topo.usable(fast), topo.usable(slow) if slow else 0.0)] * W
    return out, capacity, H


@pytest.mark.parametrize("seed", [5, 41, 73, 88, 118])
def test_model_space_is_the_former_enumeration_bit_for_bit(seed) -> None:
    """`model_space` (runs once per layout) against the former per-kernel calls: the same
    options (repr: every float's digits), capacity and local size, on fresh models (each memo then holds the
    same entries in the same order) and on models whose memos hold some entries already (as in `optimize`)."""
    from sharding.family import instance
    from sharding.plan import ShardingType
    inst = instance(seed)
    rt = inst.topology.reserve_inputs(inst.workload.ids_per_batch)
    pairs = [(CostModel(inst.workload, rt), TorchRecCostModel(inst.workload, rt)) for _ in range(3)]
    got, want = model_space(*pairs[0]), _former_model_space(*pairs[1])
    assert repr(got) == repr(want) and len(got[0]) >= 5 * len(inst.workload.tables)
    assert all(repr(a._memo) == repr(b._memo) for a, b in zip(pairs[0], pairs[1], strict=True))
    cost, trec = pairs[2]
    for t in inst.workload.tables[::2]:  # entries priced before the search, in another order
        cost.shard_memory(t, ShardingType.TABLE_WISE, t.rows, t.dim, rt.fast.name)
        trec.shard_cost(t, ShardingType.TABLE_WISE, t.rows, t.dim, rt.fast.name)
    assert repr(model_space(cost, trec)) == repr(want)
