"""Where the step goes: resource loads add up to the plan's step, and a balanced placement costs their means."""
from dataclasses import replace

import numpy as np
import pytest

from benchmarks.plan_cli import resource_table
from sharding import BASELINES, CostModel, PlanWorkload, load_topology
from sharding.tablesets import load_tables
from tests.sharding.test_cost import _two_table_plan


@pytest.mark.parametrize("name", ["round_robin", "greedy_lookups"])
def test_step_is_the_sum_of_resource_maxima_plus_the_fixed_rest(name: str) -> None:
    wl = PlanWorkload(load_tables("random:30:2"), 512, "train")
    topo = replace(load_topology("dgx_h100_x2", 16), step_overhead=1e-4)
    cost = CostModel(wl, topo)
    plan = BASELINES[name](wl, topo)
    loads, rest = cost.resource_loads(plan)
    assert {"fwd compute", "bwd compute", "optimizer"} <= set(loads)
    assert all(v.shape == (16,) and (v >= 0).all() for v in loads.values())
    assert sum(float(v.max()) for v in loads.values()) + rest == pytest.approx(cost.plan_cost(plan), rel=1e-12)
    assert rest >= 1e-4  # the step overhead is in the fixed rest, never in a resource


def test_one_rank_holding_everything_shows_as_imbalance() -> None:
    cost, plan = _two_table_plan(on_rank_zero=True)
    loads, _ = cost.resource_loads(plan)
    fwd = loads["fwd compute"]
    assert fwd[1] == 0 and fwd[0] > 0 and np.isclose(fwd.max() - fwd.mean(), fwd[0] / 2)
    text = resource_table(plan, cost)
    assert "fwd compute" in text and "imbalance" in text
