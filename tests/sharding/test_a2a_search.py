"""Issue 19 in the search: where an all-to-all costs its mean over ranks (CPU ranks), the search's own score of a
plan (`Loads.const` + Σ_k max_r L[k, r], the step outside the embedding stages aside) is the step
`CostModel.plan_cost` prices, after the greedy packing, the local search and the sharding-type moves, and for the
loads of any plan; GPU ranks keep their all-to-all rows (the busiest rank's). Bounds stay below the plans."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sharding import CostModel, PlanWorkload, lower_bound
from sharding.lns import loads_of
from sharding.pack import Builder, NoFit
from sharding.search import Resources
from sharding.tiers import assign_tiers
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.conftest import tables, topologies
from tests.sharding.test_lns import _with_overheads


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=16), topologies(), st.sampled_from(["cpu", "cuda"]), st.booleans(),
       st.sampled_from([0.25, 1.0]), st.booleans(), st.booleans())
def test_the_search_scores_a_plan_as_plan_cost_prices_it(ts, topo, device, overheads, theta, dp, least_work,  # noqa: ANN001
                                                         ) -> None:
    topo = replace(topo, device=device)
    topo = _with_overheads(topo) if overheads else topo
    wl = PlanWorkload(ts, 512, "train")
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    b = Builder(Resources(cost, trec, (lower_bound(cost, relax=False).value, lower_bound(trec).value)),
                assign_tiers(cost), 20)
    assert any(op == "all_to_all" for _, _, op in b.res.keys[3:]) == (device == "cuda")  # CPU: no rows
    try:
        state, pieces, layout = b.placed(theta, 0.5, dp, least_work)
    except NoFit:
        return
    types = {name: st for name, (st, _) in layout.items()}
    plan = b.finish(state, pieces, layout)  # local search, type moves, local search again
    event("types moved" if {n: tp.sharding_type for n, tp in plan.tables.items()} != types else "types kept")
    step = cost.plan_cost(plan)
    for loads in (state, loads_of(b.res, plan)[0]):  # the search's own state, and the plan's loads afresh
        score = float(loads.const + loads.L[:-1].max(axis=1).sum()) + cost.outside()
        assert score == pytest.approx(step, rel=1e-9)
    assert lower_bound(cost).value <= step * (1 + 1e-9)
