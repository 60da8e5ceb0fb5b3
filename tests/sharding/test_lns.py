"""Exact two-rank re-splits (`sharding.lns`): never a worse or invalid plan, on both models; they do improve a
plan the local search leaves; the optimizer's pick keeps its guarantees with them."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sharding import CostModel, PlanWorkload, load_topology, lower_bound, validate_plan
from sharding.lns import loads_of, refine_plan
from sharding.pack import Builder, NoFit
from sharding.search import Resources
from sharding.tiers import assign_tiers
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.conftest import tables, topologies


def _with_overheads(topo):  # noqa: ANN001, ANN202
    """The topology with fixed per-group stage costs, so holding a group's first shard on a rank costs extra."""
    per = {"lookup": 3e-5, "lookup_bwd": 5e-5, "input_dist": 2e-5, "output_dist": 2e-5, "output_dist_bwd": 2e-5}
    return replace(topo, stage_overhead={g: dict(per) for g in ("base", "TW", "CW", "RW", "TWRW", "DP")})


def _setup(wl: PlanWorkload, topo) -> tuple[CostModel, TorchRecCostModel, Builder]:  # noqa: ANN001
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    lb = (lower_bound(cost, relax=False).value, lower_bound(trec).value)
    return cost, trec, Builder(Resources(cost, trec, lb), assign_tiers(cost), 20)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=20), st.one_of(topologies(), topologies().map(_with_overheads)),
       st.sampled_from([0.25, 1.0]), st.booleans(), st.sampled_from([0, 30]))
def test_pair_resplits_never_worsen_a_plan_and_keep_it_valid(ts, topo, theta, dp, flat) -> None:  # noqa: ANN001
    wl = PlanWorkload(ts, 512, "train")
    cost, trec, b = _setup(wl, topo)
    try:
        plan = b.pack(theta, 0.5, dp, False)
    except NoFit:
        return
    state, _ = loads_of(b.res, plan)  # the decomposition the step prices is the plan's cost
    assert abs(float(state.const + state.L[:-1].max(axis=1).sum()) + topo.step_overhead - cost.plan_cost(plan)) \
        <= 1e-9 * cost.plan_cost(plan)
    refined = refine_plan(b.res, plan, 200, flat_iters=flat)  # flat > 0: p-norm moves and swaps first
    event("re-split" if refined is not None else "left as is")
    if refined is None:
        return
    validate_plan(refined, wl, topo, cost)
    assert cost.plan_cost(refined) <= cost.plan_cost(plan) * (1 + 1e-9)
    assert trec.plan_cost(refined) <= trec.plan_cost(plan) * (1 + 1e-9)
    assert {n: tp.sharding_type for n, tp in refined.tables.items()} == \
        {n: tp.sharding_type for n, tp in plan.tables.items()}


def test_pair_resplits_lower_the_step_of_the_100_table_packing() -> None:
    from sharding.tablesets import load_tables
    wl = PlanWorkload(load_tables("random:100:1"), 512)
    topo = load_topology("dgx_h100_x2", 16)
    cost, trec, b = _setup(wl, topo)
    b.iters = 100
    plan = b.pack(0.5, 0.5, True, False, twrw_first=True)
    refined = refine_plan(b.res, plan, 300)
    assert refined is not None
    validate_plan(refined, wl, topo, cost)
    assert cost.plan_cost(refined) < cost.plan_cost(plan) * (1 - 1e-3)
    assert trec.plan_cost(refined) <= trec.plan_cost(plan) * (1 + 1e-9)


def test_flatten_then_pairs_go_below_pairs_alone_on_the_100_table_pick() -> None:
    """random100/16's picked packing: the pairs alone stall (every move leaves some maximum in place); p-norm moves
    first reach a lower step, TorchRec's rating capped at the packing's."""
    from sharding.tablesets import load_tables
    wl = PlanWorkload(load_tables("random:100:1"), 512)
    topo = load_topology("dgx_h100_x2", 16)
    cost, trec, b = _setup(wl, topo)
    b.iters = 100
    plan = b.pack(0.5, 0.5, True, False, twrw_first=True)
    pairs, both = refine_plan(b.res, plan, 300), refine_plan(b.res, plan, 300, flat_iters=200)
    assert pairs is not None and both is not None
    validate_plan(both, wl, topo, cost)
    assert cost.plan_cost(both) < cost.plan_cost(pairs)
    assert trec.plan_cost(both) <= trec.plan_cost(plan) * (1 + 1e-9)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=20), st.one_of(topologies(), topologies().map(_with_overheads)),
       st.sampled_from([0.0, 0.25, 1.0]), st.booleans(), st.sampled_from([False, True, 2]))
def test_loads_of_a_lazy_plan_are_bitwise_those_of_its_shards(ts, topo, theta, dp, lw) -> None:  # noqa: ANN001
    """`loads_of` reads a `table_plan` plan by its shapes (no shards made): the same loads, counts, memory and
    pieces, bit for bit, as from the same plan built from its `Shard`s."""
    import numpy as np

    from sharding.plan import ShardingPlan
    wl = PlanWorkload(ts, 512, "train")
    _, _, b = _setup(wl, topo)
    try:
        plan = b.pack(theta, 0.5, dp, lw)
    except NoFit:
        return
    lazy = {n for n, tp in plan.tables.items() if "shards" not in tp.__dict__}
    s1, p1 = loads_of(b.res, plan)
    assert all("shards" not in plan.tables[n].__dict__ for n in lazy)  # read by shapes only
    s2, p2 = loads_of(b.res, ShardingPlan.from_dict(plan.to_dict()))  # eager: one `put` per shard
    assert s1.L.tobytes() == s2.L.tobytes() and np.array_equal(s1.count, s2.count)
    assert all(s1.used[t].tobytes() == s2.used[t].tobytes() for t in s1.used)
    assert [(p.table, p.st, p.rank, p.vec.tobytes(), p.mem) for p in p1] == \
        [(p.table, p.st, p.rank, p.vec.tobytes(), p.mem) for p in p2]
