"""The step's time outside the embedding stages: calibrated from tiny plans, added once to every plan's step,
kept out of the per-rank embedding time the validation compares."""
from dataclasses import replace

import pytest

from benchmarks.calibrate import OVERHEAD_PLANS, step_overhead
from benchmarks.validate_cost import _ours_rank
from sharding.topology import Topology, TopologyError
from tests.sharding.test_cost import _two_table_plan


def test_step_overhead_adds_once_to_the_step_and_not_to_the_embedding_time() -> None:
    cost, plan = _two_table_plan(on_rank_zero=True)
    before, ranks_before = cost.plan_cost(plan), cost.breakdown(plan)
    cost.topology = replace(cost.topology, step_overhead=2.5e-3)
    after, ranks = cost.plan_cost(plan), cost.breakdown(plan)
    assert after == pytest.approx(before + 2.5e-3, abs=1e-12)
    for r, r0 in zip(ranks, ranks_before, strict=True):
        assert r.elapsed == pytest.approx(after, abs=1e-12) and r.wait == pytest.approx(r0.wait, abs=1e-12)
        record = {"prediction": {"ours_per_rank": [r.to_dict()]}}
        assert _ours_rank(record, 0) == pytest.approx(1e3 * r0.elapsed, abs=1e-9)


def test_step_overhead_round_trips_and_must_not_be_negative() -> None:
    cost, _ = _two_table_plan(on_rank_zero=True)
    topo = replace(cost.topology, step_overhead=1e-3)
    assert Topology.from_dict(topo.to_dict()).step_overhead == 1e-3
    with pytest.raises(TopologyError, match="step_overhead"):
        replace(topo, step_overhead=-1e-3)


def test_calibrated_step_overhead_is_the_median_gap_of_the_tiny_plans() -> None:
    stages = ("input_dist", "lookup", "output_dist", "output_dist_bwd", "lookup_bwd", "optimizer")
    times = {k: {s: 1e-4 for s in stages} for k in OVERHEAD_PLANS}
    gaps = [1e-3, 2e-3, 3e-3, 4e-3, 5e-3, -1e-3]  # a step shorter than its stages (noise) counts as 0
    steps = {k: 6e-4 + g for k, g in zip(OVERHEAD_PLANS, gaps, strict=True)}
    assert step_overhead(times, steps) == pytest.approx(2.5e-3)
    assert step_overhead(times, {}) == 0.0


def test_per_rank_gaps_replace_the_sum_of_maxima_when_stored() -> None:
    stages = ("input_dist", "lookup", "output_dist", "output_dist_bwd", "lookup_bwd", "optimizer")
    times = {k: {s: 1e-4 for s in stages} for k in OVERHEAD_PLANS}  # max over ranks: Σ = 6e-4
    steps = {k: 5e-4 for k in OVERHEAD_PLANS}  # below the sum of maxima: the old estimate is 0
    gaps = {k: 1e-3 for k in OVERHEAD_PLANS}
    gaps[OVERHEAD_PLANS[0]] = -1e-3  # one plan's noise: clamped at 0, and the median ignores it
    assert step_overhead(times, steps) == 0.0
    assert step_overhead(times, steps, gaps) == pytest.approx(1e-3)
