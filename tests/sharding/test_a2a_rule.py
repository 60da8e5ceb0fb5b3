"""Issue 19: on CPU ranks an all-to-all costs the mean over ranks of its seconds (one rank holding every table is
priced as a balanced exchange of the same bytes); GPU ranks keep the busiest rank's; bounds stay below the step."""
from dataclasses import replace

import numpy as np
import pytest

from embedding.spec import TableSpec
from sharding import CostModel, PlanWorkload, lower_bound
from sharding.layouts import table_plan
from sharding.plan import ShardingPlan, ShardingType
from tests.sharding.conftest import topology

TABLES = (TableSpec("a", 100_000, 64), TableSpec("b", 100_000, 64), TableSpec("c", 50_000, 32))


def _plans(device: str) -> tuple[CostModel, ShardingPlan, ShardingPlan]:
    topo = replace(topology(1, 2, 8.0), device=device)
    tw = ShardingType.TABLE_WISE
    stacked = ShardingPlan(2, {t.name: table_plan(t, tw, [0], "hbm") for t in TABLES})
    spread = ShardingPlan(2, {t.name: table_plan(t, tw, [i % 2], "hbm") for i, t in enumerate(TABLES)})
    return CostModel(PlanWorkload(TABLES, 512, "train"), topo), stacked, spread


def _a2a_per_rank(cost: CostModel, plan: ShardingPlan) -> np.ndarray:
    per = np.zeros(plan.world_size)
    for tp in plan.tables.values():
        for s in tp.shards:
            per[s.rank] += sum(x for _, op, x in cost.message_times(cost.tables[tp.name], tp.sharding_type, s.rows,
                                                                     s.cols) if op == "all_to_all")
    return per


@pytest.mark.parametrize("device, rule", [("cpu", np.mean), ("cuda", np.max)])
def test_all_to_all_priced_by_the_mean_on_cpu_and_the_busiest_rank_on_gpu(device: str, rule) -> None:  # noqa: ANN001
    cost, stacked, spread = _plans(device)
    assert cost.topology.all_to_all_by_mean == (device == "cpu")
    for plan in (stacked, spread):
        a2a = _a2a_per_rank(cost, plan)
        assert a2a.max() > 0
        comms = cost.breakdown(plan)[0].fwd_comms + cost.breakdown(plan)[0].bwd_comms
        assert comms == pytest.approx(float(rule(a2a)), rel=1e-12)  # TW: every message is an all-to-all
        loads, rest = cost.resource_loads(plan)
        assert sum(float(v.max()) for v in loads.values()) + rest == pytest.approx(cost.plan_cost(plan), rel=1e-12)
    # the stacked plan's all-to-alls move the same total bytes as the spread one's
    assert _a2a_per_rank(cost, stacked).sum() == pytest.approx(_a2a_per_rank(cost, spread).sum(), rel=1e-12)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_lower_bounds_stay_below_stacked_and_spread_plans(device: str) -> None:
    cost, stacked, spread = _plans(device)
    lb = lower_bound(cost)
    for plan in (stacked, spread):
        assert lb.value <= cost.plan_cost(plan) * (1 + 1e-9)
