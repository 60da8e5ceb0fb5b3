"""The per-case bounds (`sharding.bound_cases`) never exceed a plan they cover: every table-wise / data-parallel
plan of a small instance with hot tables, enumerated exhaustively (a plan keeping a table whole is above that
table's bound; every plan is above its own sharding types' bound and the case split's); random plans mixing all
five types on calibrated topologies (their own types' bound). And the split is never below the plain cut."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedding.spec import AccessSpec, PoolingSpec, TableSpec
from sharding import CostModel, PlanError, PlanWorkload, lower_bound, validate_plan
from sharding.bound_cases import case_split_bound, hot_tables, types_bound, whole_table_bounds
from sharding.plan import ShardingType
from tests.sharding.conftest import tables, topology
from tests.sharding.test_bound_cut import _valid_costed, _with_hot
from tests.sharding.test_bound_dp_cut import _random_plan
from tests.sharding.test_bounds import calibrated

TOL = 1 + 1e-9


def _instance() -> tuple[PlanWorkload, object, CostModel]:
    """Two hot tables (more lookups than a rank's share) and four cool wide ones on 3 ranks."""
    cool = tuple(TableSpec(f"c{i}", 20_000, 256, "fp32", PoolingSpec("fixed", 4.0 + i), AccessSpec("uniform"))
                 for i in range(4))
    warm = TableSpec("warm", 30_000, 128, "fp32", PoolingSpec("fixed", 200.0), AccessSpec("uniform"))
    wl = PlanWorkload((*_with_hot(cool, 300.0), warm), 512, "train")
    topo = topology(1, 3, 1e4)
    return wl, topo, CostModel(wl, topo)


def test_whole_table_and_split_bounds_stay_below_every_plan_they_cover() -> None:
    wl, topo, cost = _instance()
    plans = list(_valid_costed(wl, topo, cost))
    assert len(plans) > 1000
    hot = hot_tables(cost, 2)
    assert hot == ["hot", "warm"]
    whole = whole_table_bounds(cost, hot)
    for name in hot:
        kept = [c for c, p in plans if p.tables[name].sharding_type == ShardingType.TABLE_WISE]
        assert whole[name] <= min(kept) * TOL, (name, whole[name], min(kept))
    split, cases, _ = case_split_bound(cost, 3)
    best = min(c for c, _ in plans)
    assert lower_bound(cost).cut <= split * TOL <= best * TOL**2
    assert [n for n, _ in cases][:2] == ["hot", "warm"]
    # the hot table whole costs more than the overall bound here: the per-table figure says something the bound does not
    assert whole["hot"] > lower_bound(cost).value * 1.01


def test_types_bound_stays_below_each_plan_of_those_types() -> None:
    wl, topo, cost = _instance()
    plans = list(_valid_costed(wl, topo, cost))
    rng = random.Random(7)
    sample = [min(plans, key=lambda x: x[0]), *rng.sample(plans, 12)]
    for c, plan in sample:
        assert types_bound(cost, plan) <= c * TOL


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(max_count=7), calibrated(), st.sampled_from([5.0, 80.0]), st.sampled_from(["train", "inference"]),
       st.integers(0, 2**31))
def test_types_bound_stays_below_random_mixed_plans(ts, topo, pooling, mode, seed) -> None:
    wl = PlanWorkload(_with_hot(ts, pooling), 512, mode)
    cost = CostModel(wl, topo)
    rng = random.Random(seed)
    for _ in range(4):
        plan = _random_plan(wl, topo.world_size, min(topo.ranks_per_host, topo.world_size), rng)
        try:
            validate_plan(plan, wl, topo, cost)
        except PlanError:
            continue
        assert types_bound(cost, plan) <= cost.plan_cost(plan) * TOL


def test_an_unknown_table_is_named() -> None:
    _, _, cost = _instance()
    with pytest.raises(KeyError, match="'nope'"):
        whole_table_bounds(cost, ["nope"])


def test_bound_study_reports_the_criteo_set(tmp_path, capsys) -> None:
    import json

    from benchmarks.bound_study import main
    out = tmp_path / "study.jsonl"
    assert main(["--sets", "criteo_tb/8", "--hot", "2", "--depth", "2", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    lb, ours = rec["bound_s"], rec["ours_s"]
    assert lb * (1 - 2e-5) <= rec["ours_types_bound_s"] <= ours * TOL
    assert [h["table"] for h in rec["hot"]] == ["t0", "t1"] and all(h["whole_bound_s"] >= lb * (1 - 2e-5)
                                                                    for h in rec["hot"])
    assert rec["split_cases"] == 2 and rec["split_s"] >= lb * (1 - 1e-5)
    assert "every plan with ours' sharding types" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--hot", "-1"])
