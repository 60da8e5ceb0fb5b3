"""Bad input: one clear error naming the table and the shortfall; the CLI exits ≠ 0 and writes nothing."""
from __future__ import annotations

import re

import pytest

from benchmarks.plan_cli import main
from embedding.spec import TableSpec
from sharding import PlanError, PlanWorkload, TopologyError, greedy_plan, optimize
from tests.sharding.conftest import topology


def test_topology_with_no_ranks_is_rejected() -> None:
    with pytest.raises(TopologyError, match="has no ranks"):
        topology(0, 8, 80.0)


def test_table_larger_than_any_rank_names_table_and_shortfall() -> None:
    wl = PlanWorkload((TableSpec("huge", 40_000_000, 128), TableSpec("small", 100, 16)), 128)
    topo = topology(1, 4, 16.0, ddr_gb=8.0)  # 20.6 GB table; 13.6 GB HBM + 8 GB DDR per rank
    with pytest.raises(PlanError, match=r"table 'huge' fits on no rank: .*short by"):
        greedy_plan(wl, topo, "size")
    plan = optimize(wl, topo)  # ours splits it instead
    assert plan.tables["huge"].sharding_type.value in ("column_wise", "row_wise", "table_row_wise")


def test_infeasible_budget_names_table_and_shortfall() -> None:
    wl = PlanWorkload((TableSpec("huge", 40_000_000, 128), TableSpec("small", 100, 16)), 128)
    with pytest.raises(PlanError, match=r"table 'huge' needs 20\.640 GB.*short by"):
        optimize(wl, topology(1, 2, 4.0, ddr_gb=4.0))
    wl2 = PlanWorkload(tuple(TableSpec(f"t{i}", 5_000_000, 128) for i in range(8)), 128)
    with pytest.raises(PlanError, match=r"short by"):
        optimize(wl2, topology(1, 2, 4.0, ddr_gb=4.0))


def test_cli_bad_input_exits_nonzero_and_writes_nothing(tmp_path, capsys) -> None:
    out = tmp_path / "plan.json"
    assert main(["plan", "--tables", "no_such_preset", "--hardware", "dgx_h100", "--out", str(out)]) == 2
    assert "no such file or workload preset" in capsys.readouterr().err
    assert main(["plan", "--tables", "random:5", "--hardware", "nope", "--out", str(out)]) == 2
    assert "no hardware config" in capsys.readouterr().err
    assert main(["plan", "--tables", "random:5", "--hardware", "dgx_h100", "--ranks", "12",
                 "--out", str(out)]) == 2
    assert "not a multiple" in capsys.readouterr().err
    lst = tmp_path / "tables.csv"
    lst.write_text("name,rows,dim,pooling\nbig,900000000,256,2\n")
    assert main(["plan", "--tables", str(lst), "--hardware", "dev_2core", "--optimizer", "greedy_size",
                 "--out", str(out), "--no-torchrec-estimate"]) == 2
    assert "'big'" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == [lst]


def test_overfull_rank_names_rank_shortfall_and_its_three_largest_tables() -> None:
    """The message lists the rank's largest tables (as computed when the check ran one list entry per shard)."""
    from sharding import CostModel, ShardingPlan, validate_plan
    from sharding.layouts import table_plan
    from sharding.plan import ShardingType

    tables = tuple(TableSpec(f"t{i}", rows, 128) for i, rows in enumerate((2_000_000, 3_000_000, 1_000_000,
                                                                            2_500_000, 500_000)))
    wl, topo = PlanWorkload(tables, 128), topology(1, 2, 4.0)
    tier = topo.fast.name
    plan = ShardingPlan(2, {t.name: table_plan(t, ShardingType.TABLE_WISE, [0 if i != 2 else 1], tier)
                            for i, t in enumerate(tables)})
    cost = CostModel(wl, topo.reserve_inputs(wl.ids_per_batch))
    held = sorted(((sum(cost.shard_memory(t, ShardingType.TABLE_WISE, t.rows, t.dim, tier, 0.0).values()), t.name)
                   for i, t in enumerate(tables) if i != 2), reverse=True)[:3]
    assert [n for _, n in held] == ["t1", "t3", "t0"]
    big = ", ".join(f"{n} ({b / 1e9:.3f} GB)" for b, n in held)
    with pytest.raises(PlanError, match=rf"^rank 0 {tier}: needs .* usable \(short by .*\); largest tables there: "
                                        rf"{re.escape(big)}$"):
        validate_plan(plan, wl, topo)
