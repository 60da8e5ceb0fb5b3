"""Shard layouts built exactly as TorchRec builds them, so a plan converts to TorchRec without reshaping.

Row-wise and table-row-wise give each rank ceil(rows / n) rows (the tail ranks get fewer, possibly none);
column-wise cuts the dim into equal blocks whose width is a multiple of 4.
"""
from __future__ import annotations

import math

from embedding.spec import TableSpec
from sharding.plan import Shard, ShardingType, TablePlan

__all__ = ["row_ranges", "row_sizes", "column_splits", "torchrec_column_pieces", "table_plan"]


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


def torchrec_column_pieces(dim: int, min_width: int = 128) -> int:
    """The column blocks TorchRec's enumerator cuts a dim into by default (`_get_block_size_for_cw_shard` with
    `MIN_CW_DIM` = 128): blocks of the least width ≥ `min_width` that divides the dim and is a multiple of 4, else
    one block of the whole dim."""
    width = next((i for i in range(min_width, dim) if dim % i == 0 and i % 4 == 0), dim)
    return dim // width


def table_plan(t: TableSpec, st: ShardingType, ranks: list[int], tier: str, cache_fraction: float = 0.0,
               ) -> TablePlan:
    """The shards of table `t` for sharding type `st` on `ranks` (CW: one rank per column block; RW/TWRW: one
    rank per row block; DP: every rank), all in `tier`. `TablePlan.alike` is filled at once (from the block
    sizes, in the order the shards give); the shards themselves are made when first read (`TablePlan.__getattr__`)."""
    ranks, n, dim = list(ranks), len(ranks), t.dim
    row_blocks = st not in (ShardingType.TABLE_WISE, ShardingType.DATA_PARALLEL, ShardingType.COLUMN_WISE)
    cols = dim // n if st == ShardingType.COLUMN_WISE and n else dim
    alike: dict[tuple[int, int, str, float], list[int]] = {}  # `TablePlan.alike`
    block = math.ceil(t.rows / n) if row_blocks and n else 0
    if not block:
        if n:
            alike[(t.rows if not row_blocks else 0, cols, tier, cache_fraction)] = ranks
    else:  # as `row_sizes`: full blocks, the tail, empty ones
        full = t.rows // block
        tail = t.rows - full * block
        alike[(block, dim, tier, cache_fraction)] = ranks[:full]
        if tail:
            alike[(tail, dim, tier, cache_fraction)] = [ranks[full]]
        if ranks[full + bool(tail):]:
            alike[(0, dim, tier, cache_fraction)] = ranks[full + bool(tail):]

    def shards() -> tuple[Shard, ...]:
        if st in (ShardingType.TABLE_WISE, ShardingType.DATA_PARALLEL):
            blocks = [(r, 0, t.rows, 0, dim) for r in ranks]
        elif st == ShardingType.COLUMN_WISE:
            blocks = [(r, 0, t.rows, i * cols, (i + 1) * cols) for i, r in enumerate(ranks)]
        else:
            blocks = [(r, a, b, 0, dim) for r, (a, b) in zip(ranks, row_ranges(t.rows, n), strict=True)]
        new, put = object.__new__, object.__setattr__  # `Shard.fast` inlined: plans of 10^5 row-wise shards
        out = []
        for rank, r0, r1, c0, c1 in blocks:
            s = new(Shard)
            put(s, "__dict__", {"rank": rank, "row_start": r0, "row_end": r1, "col_start": c0, "col_end": c1,
                                "tier": tier, "cache_fraction": cache_fraction})
            out.append(s)
        return tuple(out)

    plan = object.__new__(TablePlan)
    object.__setattr__(plan, "__dict__", {"name": t.name, "sharding_type": st, "_build": shards, "_alike": alike})
    return plan
