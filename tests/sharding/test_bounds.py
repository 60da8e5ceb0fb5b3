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
