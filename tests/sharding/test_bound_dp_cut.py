"""The data-parallel cut of the LP bound (the rank holding a table's largest piece also holds every other
data-parallel replica) stays below the step of random plans that mix data-parallel with every other type."""
from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharding import CostModel, PlanError, PlanWorkload, lower_bound, validate_plan
from sharding.layouts import column_splits, table_plan
from sharding.plan import ShardingPlan, ShardingType
from tests.sharding.conftest import tables, topology


def _random_plan(wl: PlanWorkload, w: int, h: int, rng: random.Random) -> ShardingPlan:
    out = {}
    for t in wl.tables:
        st = rng.choice([ShardingType.DATA_PARALLEL, ShardingType.DATA_PARALLEL, ShardingType.TABLE_WISE,
                         ShardingType.COLUMN_WISE, ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE])
        if st == ShardingType.COLUMN_WISE:
            ks = [k for k in column_splits(t.dim) if k <= w]
            ranks = rng.sample(range(w), rng.choice(ks)) if ks else [rng.randrange(w)]
            st = st if ks else ShardingType.TABLE_WISE
        elif st == ShardingType.ROW_WISE or st == ShardingType.DATA_PARALLEL:
            ranks = list(range(w))
        elif st == ShardingType.TABLE_ROW_WISE:
            host = rng.randrange(w // h)
            ranks = list(range(host * h, host * h + h))
        else:
            ranks = [rng.randrange(w)]
        out[t.name] = table_plan(t, st, ranks, "hbm")
    return ShardingPlan(w, out)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=10), st.integers(1, 2), st.sampled_from([2, 4]), st.sampled_from(["train", "inference"]),
       st.integers(0, 2**31), st.sampled_from([0.0, 2e-4]))
def test_bound_stays_below_random_mixed_plans(ts, hosts, per_host, mode, seed, step_overhead) -> None:
    topo = replace(topology(hosts, per_host, 1e4, 1e4), step_overhead=step_overhead)
    wl = PlanWorkload(ts, 512, mode)
    cost = CostModel(wl, topo)
    lb = lower_bound(cost).value
    rng = random.Random(seed)
    for _ in range(20):
        plan = _random_plan(wl, topo.world_size, per_host, rng)
        try:
            validate_plan(plan, wl, topo, cost)
        except PlanError:
            continue
        assert lb <= cost.plan_cost(plan) * (1 + 1e-9)
