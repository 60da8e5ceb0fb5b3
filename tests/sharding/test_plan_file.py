"""Plan files round-trip; damaged ones fail with one error naming the table."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from sharding import PlanError, PlanWorkload, ShardingPlan, optimize, validate_plan
from sharding.plan import Shard, TablePlan
from tests.sharding.conftest import tables, topologies, topology


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(tables(), topologies())
def test_plan_file_round_trip(tmp_path, ts, topo) -> None:
    wl = PlanWorkload(ts, 512)
    try:
        plan = optimize(wl, topo)
    except PlanError:
        return
    path = tmp_path / "plan.json"
    plan.save(path)
    back = ShardingPlan.load(path)
    assert back == plan and back.tables == plan.tables
    validate_plan(back, wl, topo)


def _plan(tmp_path):
    from embedding.spec import TableSpec
    wl = PlanWorkload((TableSpec("a", 1000, 16), TableSpec("b", 500, 32), TableSpec("c", 64, 8)), 128)
    topo = topology(1, 2, 1.0)
    return wl, topo, optimize(wl, topo)


def test_plan_missing_a_table_is_rejected_naming_it(tmp_path) -> None:
    wl, topo, plan = _plan(tmp_path)
    del plan.tables["b"]
    with pytest.raises(PlanError, match=r"misses 1 table.*'b'"):
        validate_plan(plan, wl, topo)


def test_overlapping_and_missing_rows_are_rejected_with_counts(tmp_path) -> None:
    wl, topo, plan = _plan(tmp_path)
    tp = plan.tables["a"]
    s = tp.shards[0]
    from sharding.plan import ShardingType
    plan.tables["a"] = TablePlan("a", ShardingType.ROW_WISE, (
        Shard(0, 0, 600, 0, 16, s.tier), Shard(1, 500, 1000, 0, 16, s.tier)))
    with pytest.raises(PlanError, match=r"table 'a'.*row overlap at row 500 \(100 rows placed twice\)"):
        validate_plan(plan, wl, topo)
    plan.tables["a"] = TablePlan("a", ShardingType.ROW_WISE, (
        Shard(0, 0, 400, 0, 16, s.tier), Shard(1, 500, 1000, 0, 16, s.tier)))
    with pytest.raises(PlanError, match=r"table 'a'.*row gap at row 400 \(100 rows missing\)"):
        validate_plan(plan, wl, topo)


def test_damaged_plan_files_fail_clearly(tmp_path) -> None:
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(PlanError, match="not valid JSON"):
        ShardingPlan.load(p)
    p.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(PlanError, match="not a plan file"):
        ShardingPlan.load(p)
    wl, topo, plan = _plan(tmp_path)
    d = plan.to_dict()
    d["tables"]["c"]["shards"][0] = [0, 0]
    with pytest.raises(PlanError, match="table 'c'"):
        ShardingPlan.from_dict(d)
