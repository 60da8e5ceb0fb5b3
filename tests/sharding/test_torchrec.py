"""TorchRec side: conversions round-trip, its planner's plan converts to a valid plan of ours, its estimator
rates ours. Planner runs are kept tiny (it is slow)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from embedding.spec import PoolingSpec, TableSpec
from sharding import CostModel, PlanError, PlanWorkload, optimize, validate_plan
from sharding.torchrec_adapter import (
    from_torchrec_plan,
    run_torchrec_planner,
    to_constraints,
    to_torchrec_plan,
    torchrec_estimate,
)
from tests.sharding.conftest import tables, topologies, topology


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=10), topologies())
def test_torchrec_conversion_round_trip(ts, topo) -> None:
    wl = PlanWorkload(ts, 256)
    try:
        plan = optimize(wl, topo, time_limit=0.2)
    except PlanError:
        return
    back = from_torchrec_plan(to_torchrec_plan(plan, wl, topo), wl, topo)
    assert back.tables == plan.tables
    cons = to_constraints(wl, topo, plan)
    assert all(cons[n].sharding_types == [tp.sharding_type.value] for n, tp in plan.tables.items())
    est = torchrec_estimate(plan, wl, topo)
    assert est["perf_ms"] == max(est["perf_ms_per_rank"]) > 0


def test_torchrec_planner_plan_is_valid_and_not_better_than_ours() -> None:
    ts = tuple(TableSpec(f"t{i}", r, d, pooling=PoolingSpec("fixed", p)) for i, (r, d, p) in
               enumerate([(1_000_000, 64, 4), (50_000, 128, 20), (300, 32, 1), (2_000_000, 16, 2)]))
    wl = PlanWorkload(ts, 512)
    topo = topology(1, 2, 8.0)
    trec = run_torchrec_planner(wl, topo)
    cost = CostModel(wl, topo)
    validate_plan(trec, wl, topo, cost)
    ours = optimize(wl, topo, time_limit=0.3)
    assert cost.plan_cost(ours) <= cost.plan_cost(trec) * (1 + 1e-9)
    assert torchrec_estimate(ours, wl, topo)["perf_ms"] > 0
