"""Plan validation: every row and column of every table placed exactly once (every rank once for data-parallel),
sharding types shaped as TorchRec builds them, and each rank's memory within each tier.

Errors name the table (or the rank with its largest tables) and the shortfall in bytes.
"""
from __future__ import annotations

from sharding.cost import CostModel
from sharding.plan import ShardingPlan, ShardingType, TablePlan
from sharding.topology import Topology
from sharding.workload import PlanError, PlanWorkload

__all__ = ["validate_plan", "check_coverage", "gb"]


def gb(x: float) -> str:
    return f"{x / 1e9:.3f} GB"


def _check_table(tp: TablePlan, rows: int, dim: int, topo: Topology, world: int) -> None:
    name, st, shards = tp.name, tp.sharding_type, tp.shards
    if not shards:
        raise PlanError(f"table {name!r}: no shards")
    for s in shards:
        if not 0 <= s.rank < world:
            raise PlanError(f"table {name!r}: rank {s.rank} outside 0..{world - 1}")
        if not (0 <= s.row_start <= s.row_end <= rows and 0 <= s.col_start < s.col_end <= dim):
            raise PlanError(f"table {name!r}: shard rows [{s.row_start}, {s.row_end}) cols [{s.col_start}, "
                            f"{s.col_end}) fall outside the table's {rows} rows × {dim} columns")
        topo.tier(s.tier)  # raises naming the unknown tier
        if not 0 <= s.cache_fraction <= 1:
            raise PlanError(f"table {name!r}: cache_fraction {s.cache_fraction} is outside [0, 1]")
        if s.cache_fraction > 0 and s.tier == topo.fast.name:
            raise PlanError(f"table {name!r}: a cache fraction needs a shard in a tier below {topo.fast.name!r}")
    full_cols = all(s.col_start == 0 and s.col_end == dim for s in shards)
    full_rows = all(s.row_start == 0 and s.row_end == rows for s in shards)
    ranks = [s.rank for s in shards]
    if st == ShardingType.DATA_PARALLEL:
        if not (full_rows and full_cols) or sorted(ranks) != list(range(world)):
            raise PlanError(f"table {name!r}: data-parallel needs one full replica on each of the {world} ranks, "
                            f"got {len(shards)} shards on ranks {sorted(set(ranks))[:8]}")
        return
    if st == ShardingType.TABLE_WISE and not (len(shards) == 1 and full_rows and full_cols):
        raise PlanError(f"table {name!r}: table-wise needs exactly one full shard, got {len(shards)}")
    if st == ShardingType.COLUMN_WISE and not full_rows:
        raise PlanError(f"table {name!r}: column-wise shards must hold all {rows} rows")
    if st in (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE):
        if not full_cols:
            raise PlanError(f"table {name!r}: {st.value} shards must hold all {dim} columns")
        if len(set(ranks)) != len(ranks):
            raise PlanError(f"table {name!r}: {st.value} puts two shards on one rank")
        if st == ShardingType.TABLE_ROW_WISE and len({topo.host_of(r) for r in ranks}) != 1:
            raise PlanError(f"table {name!r}: table-row-wise shards must stay on one host")
    check_coverage(tp, rows, dim)


def check_coverage(tp: TablePlan, rows: int, dim: int) -> None:
    """Shards must tile rows × columns exactly: column ranges partition [0, dim) and, within each column range,
    row ranges partition [0, rows)."""
    by_cols: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for s in tp.shards:
        by_cols.setdefault((s.col_start, s.col_end), []).append((s.row_start, s.row_end))
    at = 0
    for c0, c1 in sorted(by_cols):
        if c0 != at:
            what = "overlap" if c0 < at else "gap"
            raise PlanError(f"table {tp.name!r}: column ranges {what} at column {min(c0, at)} "
                            f"({'overlapping' if c0 < at else 'missing'} {abs(c0 - at)} columns)")
        at = c1
    if at != dim:
        raise PlanError(f"table {tp.name!r}: columns {at}..{dim} are not placed ({dim - at} columns missing)")
    for (c0, c1), spans in by_cols.items():
        r = 0
        for r0, r1 in sorted(s for s in spans if s[1] > s[0]):
            if r0 != r:
                kind = "overlap" if r0 < r else "gap"
                raise PlanError(f"table {tp.name!r}: columns [{c0}, {c1}) have a row {kind} at row {min(r0, r)} "
                                f"({abs(r0 - r)} rows {'placed twice' if r0 < r else 'missing'})")
            r = r1
        if r != rows:
            raise PlanError(f"table {tp.name!r}: columns [{c0}, {c1}) miss rows {r}..{rows} ({rows - r} rows)")


def validate_plan(plan: ShardingPlan, workload: PlanWorkload, topology: Topology,
                  cost: CostModel | None = None) -> None:
    """Raise `PlanError` for the first problem found; return None for a valid plan."""
    if plan.world_size != topology.world_size:
        raise PlanError(f"plan is for {plan.world_size} ranks, topology {topology.name!r} has "
                        f"{topology.world_size}")
    names = {t.name for t in workload.tables}
    missing = [n for n in (t.name for t in workload.tables) if n not in plan.tables]
    if missing:
        raise PlanError(f"plan misses {len(missing)} table(s): {missing[:5]}")
    extra = sorted(set(plan.tables) - names)
    if extra:
        raise PlanError(f"plan places table(s) the workload does not have: {extra[:5]}")
    for t in workload.tables:
        _check_table(plan.tables[t.name], t.rows, t.dim, topology, plan.world_size)
    topology = topology.reserve_inputs(workload.ids_per_batch)
    cost = cost or CostModel(workload, topology)
    per_rank = [dict.fromkeys((t.name for t in topology.tiers), 0.0) for _ in range(plan.world_size)]
    for tp in plan.tables.values():
        t = cost.tables[tp.name]
        for shape, ranks in tp.alike().items():  # a table's shards come in few shapes (replicas, equal blocks)
            mem = cost.shard_memory(t, tp.sharding_type, *shape)
            for r in ranks:
                row = per_rank[r]
                for k, v in mem.items():
                    row[k] += v
    for r, mem in enumerate(per_rank):
        for tier, used in mem.items():
            cap = topology.usable(tier)
            if used > cap * (1 + 1e-9):
                big = ", ".join(f"{n} ({gb(b)})" for b, n in sorted(_held(plan, cost, r), reverse=True)[:3])
                raise PlanError(f"rank {r} {tier}: needs {gb(used)} but has {gb(cap)} usable "
                                f"(short by {gb(used - cap)}); largest tables there: {big}")


def _held(plan: ShardingPlan, cost: CostModel, rank: int) -> list[tuple[float, str]]:
    """(bytes, table) of every shard on `rank`, in plan order: read only for the error message of an overfull rank,
    so a valid plan's check makes no list entry per shard (10^5 data-parallel replicas on 256 ranks)."""
    out = []
    for tp in plan.tables.values():
        t = cost.tables[tp.name]
        for s in tp.shards:
            if s.rank == rank:
                out.append((sum(cost.shard_memory(t, tp.sharding_type, s.rows, s.cols, s.tier,
                                                  s.cache_fraction).values()), tp.name))
    return out
