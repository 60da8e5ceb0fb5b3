"""Shard layouts built exactly as TorchRec builds them, so a plan converts to TorchRec without reshaping.

Row-wise and table-row-wise give each rank ceil(rows / n) rows (the tail ranks get fewer, possibly none);
column-wise cuts the dim into equal blocks whose width is a multiple of 4.
"""
from __future__ import annotations

import math

from embedding.spec import TableSpec
from sharding.plan import Shard, ShardingType, TablePlan

__all__ = ["row_ranges", "row_sizes", "column_splits", "table_plan"]


def row_ranges(rows: int, n: int) -> list[tuple[int, int]]:
    """TorchRec's `_calculate_rw_shard_sizes_and_offsets`: blocks of ceil(rows / n)."""
    block = math.ceil(rows / n)
    return [(min(i * block, rows), min((i + 1) * block, rows)) for i in range(n)]


def row_sizes(rows: int, n: int) -> list[tuple[int, int]]:
    """The distinct shard row counts of `row_ranges(rows, n)` with how many shards have each (fast for big n)."""
    block = math.ceil(rows / n)
    full = rows // block
    tail = rows - full * block
    out = [(block, full)]
    if tail:
        out.append((tail, 1))
    if n - full - (1 if tail else 0) > 0:
        out.append((0, n - full - (1 if tail else 0)))
    return out


def column_splits(dim: int) -> list[int]:
    """Shard counts k > 1 for which dim splits into k equal blocks of a width divisible by 4."""
    return [k for k in range(2, dim // 4 + 1) if dim % k == 0 and (dim // k) % 4 == 0]


def table_plan(t: TableSpec, st: ShardingType, ranks: list[int], tier: str, cache_fraction: float = 0.0,
               ) -> TablePlan:
    """The shards of table `t` for sharding type `st` on `ranks` (CW: one rank per column block; RW/TWRW: one
    rank per row block; DP: every rank), all in `tier`."""
    new, put = object.__new__, object.__setattr__  # `Shard.fast` inlined: plans of 10^5 row-wise shards
    alike: dict[tuple[int, int, str, float], list[int]] = {}  # `TablePlan.alike`, filled on the way

    def shards_of(blocks: list[tuple[int, int, int, int, int]]) -> tuple[Shard, ...]:
        out = []
        for rank, r0, r1, c0, c1 in blocks:
            s = new(Shard)
            put(s, "__dict__", {"rank": rank, "row_start": r0, "row_end": r1, "col_start": c0, "col_end": c1,
                                "tier": tier, "cache_fraction": cache_fraction})
            out.append(s)
            alike.setdefault((r1 - r0, c1 - c0, tier, cache_fraction), []).append(rank)
        return tuple(out)

    if st in (ShardingType.TABLE_WISE, ShardingType.DATA_PARALLEL):
        shards = shards_of([(r, 0, t.rows, 0, t.dim) for r in ranks])
    elif st == ShardingType.COLUMN_WISE:
        w = t.dim // len(ranks)
        shards = shards_of([(r, 0, t.rows, i * w, (i + 1) * w) for i, r in enumerate(ranks)])
    else:
        shards = shards_of([(r, a, b, 0, t.dim)
                            for r, (a, b) in zip(ranks, row_ranges(t.rows, len(ranks)), strict=False)])
    plan = TablePlan(t.name, st, shards)
    object.__setattr__(plan, "_alike", alike)  # what `alike` would compute from these shards
    return plan
