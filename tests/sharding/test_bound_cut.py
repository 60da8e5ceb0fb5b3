"""The strengthened bound (`sharding.bound_cut`) never exceeds a plan's step: every table-wise / data-parallel plan
of small instances with one hot table, enumerated exhaustively; random plans mixing all five types on plain and
calibrated topologies; the optimizer's plans. And it is stronger than the LP where one table outweighs a rank's
share, as on the random100/16 benchmark set."""
from __future__ import annotations

import itertools
import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedding.spec import AccessSpec, PoolingSpec, TableSpec
from sharding import CostModel, PlanError, PlanWorkload, lower_bound, optimize, validate_plan
from sharding.layouts import table_plan
from sharding.plan import ShardingPlan, ShardingType
from tests.sharding.conftest import tables, topology
from tests.sharding.test_bound_dp_cut import _random_plan
from tests.sharding.test_bounds import calibrated


def _with_hot(ts: tuple[TableSpec, ...], pooling: float) -> tuple[TableSpec, ...]:
    return (*ts, TableSpec("hot", 50_000, 128, "fp32", PoolingSpec("fixed", pooling), AccessSpec("uniform")))


def _every_tw_dp_plan(wl: PlanWorkload, w: int):  # noqa: ANN202
    """Every plan whose tables are each table-wise on some rank or data-parallel."""
    for ranks in itertools.product(range(-1, w), repeat=len(wl.tables)):
        out = {}
        for t, r in zip(wl.tables, ranks, strict=True):
            out[t.name] = (table_plan(t, ShardingType.DATA_PARALLEL, list(range(w)), "hbm") if r < 0 else
                           table_plan(t, ShardingType.TABLE_WISE, [r], "hbm"))
        yield ShardingPlan(w, out)


def _valid_costed(wl: PlanWorkload, topo, cost: CostModel):  # noqa: ANN001, ANN202
    """(step, plan) of every valid plan of `_every_tw_dp_plan`."""
    for plan in _every_tw_dp_plan(wl, topo.world_size):
        try:
            validate_plan(plan, wl, topo, cost)
        except PlanError:
            continue
        yield cost.plan_cost(plan), plan


def _exhaustive_min(wl: PlanWorkload, topo, cost: CostModel) -> float:  # noqa: ANN001
    return min((c for c, _ in _valid_costed(wl, topo, cost)), default=float("inf"))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=4), st.sampled_from([(1, 2), (1, 3), (2, 2)]), st.sampled_from([5.0, 40.0, 200.0]),
       st.sampled_from(["train", "inference"]))
def test_cut_stays_below_the_exhaustive_optimum(ts, shape, pooling, mode) -> None:
    topo = topology(*shape, 1e4)
    wl = PlanWorkload(_with_hot(ts, pooling), 512, mode)
    cost = CostModel(wl, topo)
    lb = lower_bound(cost)
    assert lb.cut > 0
    assert lb.value <= _exhaustive_min(wl, topo, cost) * (1 + 1e-9), lb.to_dict()


def test_cut_binds_on_a_hot_table_and_stays_below_the_optimum() -> None:
    """One table with more lookups than a rank's share, five cool ones with wide outputs, 3 ranks: the cut is above
    the LP (+5.7% when written) and still below the best of all 4^6 table-wise / data-parallel plans."""
    cool = tuple(TableSpec(f"c{i}", 20_000, 256, "fp32", PoolingSpec("fixed", 4.0 + i), AccessSpec("uniform"))
                 for i in range(5))
    topo = topology(1, 3, 1e4)
    wl = PlanWorkload(_with_hot(cool, 300.0), 512, "train")
    cost = CostModel(wl, topo)
    lb = lower_bound(cost)
    best = _exhaustive_min(wl, topo, cost)
    assert lb.cut > lb.relaxation * 1.03, lb.to_dict()
    assert lb.value <= best * (1 + 1e-9)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=8), calibrated(), st.sampled_from([5.0, 80.0]), st.sampled_from(["train", "inference"]),
       st.integers(0, 2**31))
def test_cut_stays_below_random_mixed_and_optimised_plans(ts, topo, pooling, mode, seed) -> None:
    wl = PlanWorkload(_with_hot(ts, pooling), 512, mode)
    cost = CostModel(wl, topo)
    lb = lower_bound(cost).value
    rng = random.Random(seed)
    plans = []
    for _ in range(15):
        plans.append(_random_plan(wl, topo.world_size, min(topo.ranks_per_host, topo.world_size), rng))
    try:
        plans.append(optimize(wl, topo))
    except PlanError:
        pass
    for plan in plans:
        try:
            validate_plan(plan, wl, topo, cost)
        except PlanError:
            continue
        assert lb <= cost.plan_cost(plan) * (1 + 1e-9)


def test_cut_lifts_the_random100_bound() -> None:
    """+4.5% when written, but part of that lift excluded valid plans: keeping the hottest table whole forced
    TW's collectives besides CW's, and a CW table in one block (issue 16) is whole inside CW's group. With that
    option the cut is 0.572 ms over the relaxation's 0.570 (main's: 0.603 over 0.577)."""
    from sharding import load_topology
    from sharding.tablesets import load_tables
    cost = CostModel(PlanWorkload(load_tables("random:100:1"), 512, "train"), load_topology("dgx_h100_x2", 16))
    lb = lower_bound(cost)
    assert lb.cut > lb.relaxation * 1.002  # 1.0032 with one-block CW: the hottest table whole on one rank


def test_step_overhead_is_in_the_cut() -> None:
    topo = replace(topology(1, 4, 1e4), step_overhead=3e-4)
    cool = tuple(TableSpec(f"c{i}", 20_000, 64, "fp32", PoolingSpec("fixed", 4.0), AccessSpec("uniform"))
                 for i in range(5))
    wl = PlanWorkload(_with_hot(cool, 120.0), 512, "train")
    plain = lower_bound(CostModel(wl, replace(topo, step_overhead=0.0)))
    lb = lower_bound(CostModel(wl, topo))
    assert abs((lb.cut - plain.cut) - 3e-4) < 2e-5 * lb.cut  # the cut is shaved by 1e-5 for tolerances


def test_a_lone_data_parallel_replica_on_one_rank_is_covered() -> None:
    """One rank, DP's lookups calibrated 25× faster than TW's: the single-replica plan is valid and cheap, so every
    bound (and the optimizer's options) must include data-parallel on one rank too (found by the test above)."""
    stages = ("input_dist", "lookup", "output_dist", "output_dist_bwd", "lookup_bwd", "optimizer")
    groups = ("TW", "RW", "CW", "TWRW", "DP")
    topo = replace(topology(1, 1, 0.5), stage_overhead={g: dict.fromkeys(stages, 0.0) for g in ("base", *groups)},
                   stage_bandwidth={g: {"lookup": 5e10 if g == "DP" else 2e9, "lookup_bwd": 2e9, "input_dist": 2e9}
                                    for g in groups})
    ts = (TableSpec("t0", 3, 4, "fp32", PoolingSpec("fixed", 1.0), AccessSpec("uniform")),)
    wl = PlanWorkload(_with_hot(ts, 5.0), 512, "train")
    cost = CostModel(wl, topo)
    plan = ShardingPlan(1, {t.name: table_plan(t, ShardingType.DATA_PARALLEL, [0], "hbm") for t in wl.tables})
    validate_plan(plan, wl, topo, cost)
    assert lower_bound(cost).value <= cost.plan_cost(plan) * (1 + 1e-9)
    assert optimize(wl, topo).tables["t0"].sharding_type == ShardingType.DATA_PARALLEL
