"""The LP relaxation bound never exceeds a valid plan's step, on plain and calibrated (per-stage) topologies."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharding import BASELINES, CostModel, PlanError, PlanWorkload, lower_bound, optimize, validate_plan
from sharding.bounds import _relaxation
from tests.sharding.conftest import tables, topologies

GROUPS = ("TW", "RW", "CW", "TWRW", "DP")


@st.composite
def calibrated(draw):  # noqa: ANN001, ANN201
    """A test topology, half the time with fixed stage costs and fitted stage bandwidths as calibration writes."""
    topo = draw(topologies())
    if not draw(st.booleans()):
        return topo
    us = st.sampled_from([0.0, 5e-6, 50e-6])
    bw = st.sampled_from([2e9, 50e9, 900e9])
    overhead = {g: {s: draw(us) for s in ("input_dist", "lookup", "output_dist", "output_dist_bwd", "lookup_bwd",
                                          "optimizer")} for g in ("base", *GROUPS)}
    bandwidth = {g: {s: draw(bw) for s in ("lookup", "lookup_bwd", "input_dist")} for g in GROUPS}
    return replace(topo, stage_overhead=overhead, stage_bandwidth=bandwidth)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=12), calibrated(), st.sampled_from(["train", "inference"]))
def test_relaxation_never_exceeds_any_valid_plan(ts, topo, mode) -> None:
    wl = PlanWorkload(ts, 512, mode)
    cost = CostModel(wl, topo)
    lb = lower_bound(cost)
    assert lb.relaxation > 0 and lb.value >= lb.simple
    plans = []
    for name, fn in [("ours", optimize), *BASELINES.items()]:
        try:
            plans.append((name, fn(wl, topo)))
        except PlanError:
            continue
    for name, plan in plans:
        validate_plan(plan, wl, topo, cost)
        assert lb.value <= cost.plan_cost(plan) * (1 + 1e-9), (name, lb.to_dict(), cost.plan_cost(plan))


def test_relaxation_is_tighter_than_the_simple_bound_on_a_mixed_instance() -> None:
    from sharding import load_topology
    from sharding.tablesets import load_tables
    wl = PlanWorkload(load_tables("random:60:3"), 512, "train")
    cost = CostModel(wl, load_topology("dgx_h100_x2", 16))
    lb = lower_bound(cost, relax=False)
    assert _relaxation(cost, lb.tier_penalty) > lb.simple * 1.05


def test_bound_stays_below_plans_when_calibration_makes_the_fast_tier_dearer() -> None:
    """A calibrated fast-tier lookup figure (2 GB/s) below the slow tier's preset (16 GB/s) makes the slow tier the
    cheaper one; a bound that priced every shard in the fast tier stood above every plan that used the slow tier
    (a world-size-1 case hypothesis found). Each part is now priced in its cheapest tier."""
    from embedding.spec import AccessSpec, PoolingSpec, TableSpec
    from tests.sharding.conftest import topology
    spec = [(385_961, 256, 80.0), (1_155, 4, 80.0), (3, 4, 80.0), (3, 4, 1.0), (1_156, 4, 1.0), (3, 256, 80.0),
            (3, 256, 80.0), (1_245_794, 4, 5.0)]  # the tables hypothesis found
    ts = tuple(TableSpec(f"t{i}", r, d, "fp32", PoolingSpec("fixed", p), AccessSpec("uniform"))
               for i, (r, d, p) in enumerate(spec))
    slow_fit = {g: {s: 2e9 for s in ("lookup", "lookup_bwd", "input_dist")} for g in GROUPS}
    topo = replace(topology(1, 1, 0.5), stage_bandwidth=slow_fit)
    wl = PlanWorkload(ts, 512, "train")
    cost = CostModel(wl, topo)
    lb = lower_bound(cost)
    costs = []
    for fn in (optimize, *BASELINES.values()):
        try:
            costs.append(cost.plan_cost(fn(wl, topo)))
        except PlanError:  # a greedy baseline that fits nothing
            continue
    assert any(tp.shards[0].tier == "ddr" for tp in optimize(wl, topo).tables.values())  # the case in question
    assert lb.value <= min(costs) * (1 + 1e-9), (lb.to_dict(), costs)
