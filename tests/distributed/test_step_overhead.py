"""The step's time outside the embedding stages: calibrated from tiny plans, added once to every plan's step,
kept out of the per-rank embedding time the validation compares."""
from dataclasses import replace

import numpy as np
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


def test_outside_per_pooled_value_is_recovered_from_larger_plans_over_tiny_ones() -> None:
    from benchmarks.calibrate import pooled_values, step_overhead_per_value

    base, per = 0.7e-3, 8e-9  # synthetic: gap = base + per × pooled values, one plan's noise each side
    keys = [*OVERHEAD_PLANS, "TW:big", "RW:big", "CW:big", "TWRW:big", "DP:big"]
    gaps = {k: base + per * pooled_values(k, 2) for k in keys}
    assert pooled_values("TW:big", 2) == 512 * 64 * 4 and pooled_values("TW+RW", 2) == 16 * 16 * 8
    gaps["TW"], gaps["RW:big"] = -2e-3, 9e-3
    tiny_values = float(np.median([pooled_values(k, 2) for k in OVERHEAD_PLANS]))
    fitted = step_overhead_per_value(gaps, 2)
    assert fitted == pytest.approx(per, rel=0.02)
    assert base + fitted * tiny_values == pytest.approx(step_overhead({}, {}, gaps), rel=0.02)
    assert step_overhead_per_value({k: v for k, v in gaps.items() if ":" not in k}, 2) == 0.0  # no larger plan
    assert step_overhead_per_value({**gaps, **{k: 0.0 for k in keys if ":" in k}}, 2) == 0.0  # never negative


def test_the_measured_growth_per_pooled_value_is_kept_in_the_file_but_not_priced() -> None:
    """A calibration file's `not_priced.step_overhead_per_value` loads and leaves every price as it was: the
    validation A/B (CostModel.outside) did not keep it."""
    from sharding.cost import CostModel

    cost, plan = _two_table_plan(on_rank_zero=True)
    topo = replace(cost.topology, step_overhead=1e-3)
    d = {**topo.to_dict(), "not_priced": {"step_overhead_per_value": 2e-9}}
    loaded = Topology.from_dict(d)
    assert loaded == topo
    a, b = CostModel(cost.workload, topo), CostModel(cost.workload, loaded)
    assert a.outside() == b.outside() == 1e-3
    assert a.plan_cost(plan) == b.plan_cost(plan)
    assert b.stage_breakdown(plan)["outside"] == 1e-3 and all(r.other == 1e-3 for r in b.breakdown(plan))


def test_outside_grows_with_the_pooled_values_in_training_only_when_priced() -> None:
    """A file with a top-level `step_overhead_per_value` prices it: every rank's step outside the stages grows by
    it × batch × Σ dims in training (not in inference), once per step, never in the embedding time."""
    from sharding.cost import CostModel

    cost, plan = _two_table_plan(on_rank_zero=True)
    assert cost.workload.train
    values = cost.workload.batch_size * sum(t.dim for t in cost.workload.tables)
    topo = replace(cost.topology, step_overhead=1e-3)
    priced = Topology.from_dict({**topo.to_dict(), "step_overhead_per_value": 2e-9})
    assert priced.step_overhead_per_value == 2e-9
    assert Topology.from_dict(priced.to_dict()) == priced
    a, b = CostModel(cost.workload, topo), CostModel(cost.workload, priced)
    assert b.outside() == pytest.approx(1e-3 + 2e-9 * values)
    assert b.plan_cost(plan) == pytest.approx(a.plan_cost(plan) + 2e-9 * values, abs=1e-12)
    assert b.stage_breakdown(plan)["outside"] == pytest.approx(b.outside())
    for ra, rb in zip(a.breakdown(plan), b.breakdown(plan), strict=True):
        assert rb.other == pytest.approx(b.outside()) and rb.elapsed - rb.other == pytest.approx(ra.elapsed - ra.other)
    assert CostModel(replace(cost.workload, mode="inference"), priced).outside() == pytest.approx(1e-3)
    with pytest.raises(TopologyError, match="step_overhead"):
        replace(priced, step_overhead_per_value=-1e-9)
