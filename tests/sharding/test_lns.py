"""Exact two-rank re-splits (`sharding.lns`): never a worse or invalid plan, on both models; they do improve a
plan the local search leaves; the optimizer's pick keeps its guarantees with them."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sharding import CostModel, PlanWorkload, load_topology, lower_bound, validate_plan
from sharding.lns import loads_of, refine_plan
from sharding.pack import Builder, NoFit
from sharding.plan import ShardingType
from sharding.search import Loads, Resources
from sharding.tiers import assign_tiers
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.conftest import tables, topologies
from tests.sharding.test_rank_sums import _plans


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


def _former_loads_of(res: Resources, plan):  # noqa: ANN001, ANN202
    """`loads_of` as it was: every shard put one by one (replicas on every rank at once), in column order."""
    topo = res.cost.topology
    state = Loads(res, topo, {tp.sharding_type for tp in plan.tables.values()})
    pieces = []
    for name, tp in plan.tables.items():
        t, st = res.cost.tables[name], tp.sharding_type
        if st == ShardingType.DATA_PARALLEL and len(tp.shards) == topo.world_size:
            s = tp.shards[0]
            state.put_all(st, *res.shard(t, st, s.rows, s.cols, s.tier, s.cache_fraction))
            continue
        for s in sorted(tp.shards, key=lambda s: s.col_start):
            v, m = res.shard(t, st, s.rows, s.cols, s.tier, s.cache_fraction)
            state.put(s.rank, st, v, m)
            if st in (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE):
                pieces.append((name, st, v.tobytes(), s.rank))
    return state, pieces


@pytest.mark.parametrize("overheads", [False, True])
def test_loads_of_a_plan_are_the_former_shard_by_shard_sums_bit_for_bit(overheads: bool) -> None:
    wl, topo, plans = _plans()  # every sharding type, repeated and scattered ranks, a cached shard
    topo = _with_overheads(topo) if overheads else topo
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    res = Resources(cost, trec, (1e-3, 2e-3))
    assert res.hold.any() == overheads  # with per-holder costs, a rank's first shard of a group adds `hold`
    for plan in plans:
        state, pieces = loads_of(res, plan)
        former, former_pieces = _former_loads_of(res, plan)
        assert state.L.tobytes() == former.L.tobytes() and state.count.tobytes() == former.count.tobytes()
        assert all(state.used[k].tobytes() == former.used[k].tobytes() for k in former.used)
        assert [(p.table, p.st, p.vec.tobytes(), p.rank) for p in pieces] == former_pieces
