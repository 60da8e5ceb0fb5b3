"""Sharding-type moves during local search (`sharding.pack` retype): plans stay valid and the search objective
never gets worse than the same packing without them; on a crafted set they do change a table's type."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedding.spec import AccessSpec, PoolingSpec, TableSpec
from sharding import CostModel, PlanWorkload, lower_bound, validate_plan
from sharding.pack import Builder, NoFit
from sharding.plan import ShardingPlan
from sharding.search import Resources
from sharding.tiers import assign_tiers
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.conftest import tables, topologies, topology


def _pack(wl: PlanWorkload, topo, rounds: int, theta: float, dp: bool) -> tuple[ShardingPlan, float]:  # noqa: ANN001
    """(plan, J) of one packing with `rounds` sharding-type moves; J is the search's objective on the plan."""
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    lb = (lower_bound(cost, relax=False).value, lower_bound(trec).value)
    b = Builder(Resources(cost, trec, lb), assign_tiers(cost), 100)
    b.retype_rounds = rounds
    plan = b.pack(theta, 0.5, dp, False)
    validate_plan(plan, wl, topo, cost)
    return plan, max(cost.plan_cost(plan) / lb[0], trec.plan_cost(plan) / lb[1])


def test_retype_recuts_a_hot_table_and_lowers_the_objective() -> None:
    ts = [TableSpec("hot", 1000, 128, "fp32", PoolingSpec("fixed", 80.0), AccessSpec("uniform"))] + [
        TableSpec(f"t{i}", 100_000, 32, "fp32", PoolingSpec("fixed", 5.0), AccessSpec("uniform")) for i in range(7)]
    wl, topo = PlanWorkload(tuple(ts), 512, "train"), topology(2, 2, 16.0)
    before, j0 = _pack(wl, topo, 0, 1.0, False)
    after, j1 = _pack(wl, topo, 24, 1.0, False)
    types0 = {n: tp.sharding_type for n, tp in before.tables.items()}
    types1 = {n: tp.sharding_type for n, tp in after.tables.items()}
    assert types0 != types1
    assert j1 < j0 * (1 - 1e-6)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=16), topologies(), st.sampled_from([0.25, 1.0]), st.booleans())
def test_retype_never_worsens_the_objective(ts, topo, theta, dp) -> None:  # noqa: ANN001
    wl = PlanWorkload(ts, 512, "train")
    try:
        _, j0 = _pack(wl, topo, 0, theta, dp)
    except NoFit:
        return
    _, j1 = _pack(wl, topo, 24, theta, dp)
    assert j1 <= j0 * (1 + 1e-9)
