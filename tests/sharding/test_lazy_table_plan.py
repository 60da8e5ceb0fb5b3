"""A table plan from `layouts.table_plan` makes its shards on first read; it then equals, hashes, prints, pickles
and copies as the plan built from `Shard`s, and its `alike` is what the shards give."""
from __future__ import annotations

import copy
import pickle

import pytest

from embedding.spec import TableSpec
from sharding.layouts import row_ranges, table_plan
from sharding.plan import Shard, ShardingType, TablePlan

ST = ShardingType


def _eager(t: TableSpec, st: ShardingType, ranks: list[int], tier: str, cf: float) -> TablePlan:
    if st in (ST.TABLE_WISE, ST.DATA_PARALLEL):
        shards = [Shard(r, 0, t.rows, 0, t.dim, tier, cf) for r in ranks]
    elif st == ST.COLUMN_WISE:
        w = t.dim // len(ranks)
        shards = [Shard(r, 0, t.rows, i * w, (i + 1) * w, tier, cf) for i, r in enumerate(ranks)]
    else:
        shards = [Shard(r, a, b, 0, t.dim, tier, cf) for r, (a, b) in zip(ranks, row_ranges(t.rows, len(ranks)),
                                                                           strict=True)]
    return TablePlan(t.name, st, tuple(shards))


@pytest.mark.parametrize(("st", "ranks", "rows"), [(ST.TABLE_WISE, [3], 10), (ST.DATA_PARALLEL, list(range(8)), 7),
                                                   (ST.COLUMN_WISE, [5, 1, 2, 0], 9), (ST.ROW_WISE, list(range(8)), 1001),
                                                   (ST.ROW_WISE, list(range(16)), 5), (ST.ROW_WISE, [4, 2], 8),
                                                   (ST.ROW_WISE, list(range(7)), 1), (ST.COLUMN_WISE, [0, 1], 3),
                                                   (ST.TABLE_ROW_WISE, [8, 9, 10, 11], 13)])
def test_a_lazy_table_plan_is_the_plan_of_its_shards(st: ShardingType, ranks: list[int], rows: int) -> None:
    t = TableSpec("t", rows, 64)
    want = _eager(t, st, ranks, "ddr", 0.25)
    lazy = table_plan(t, st, ranks, "ddr", 0.25)
    assert lazy.alike() == want.alike() and list(lazy.alike()) == list(want.alike())
    assert "shards" not in lazy.__dict__  # not made yet
    assert lazy == want and hash(lazy) == hash(want) and repr(lazy) == repr(want)
    assert lazy.ranks == want.ranks
    for other in (pickle.loads(pickle.dumps(table_plan(t, st, ranks, "ddr", 0.25))),
                  copy.deepcopy(table_plan(t, st, ranks, "ddr", 0.25))):
        assert other == want and other.alike() == want.alike()
    with pytest.raises(AttributeError):
        _ = lazy.missing
