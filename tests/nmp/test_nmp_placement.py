"""Page colouring uses every rank: with fewer tables than ranks a table's pages are spread over several ranks."""
import numpy as np
import pytest

from embedding.nmp import DramGeometry, LookupStream, NmpConfig
from embedding.nmp.dram import map_lookups, placement
from embedding.nmp.fast import map_lookups_fast


def _stream(tables: int, n: int = 20_000, rows: int = 100_000) -> LookupStream:
    rng = np.random.default_rng(0)
    return LookupStream.from_arrays(rng.integers(0, tables, n), rng.integers(0, rows, n), np.arange(n) // 8,
                                    np.full(tables, rows), np.full(tables, 128))


@pytest.mark.parametrize(("tables", "dimms"), [(4, 1), (32, 8), (3, 2), (5, 16)])
def test_every_rank_holds_rows_when_tables_are_fewer_than_ranks(tables, dimms):
    cfg = NmpConfig(geometry=DramGeometry(dimms_per_channel=dimms))
    s = _stream(tables)
    d = map_lookups(cfg, s.tables, s.rows, s.table_rows, s.row_bytes)
    used = np.unique(d.channel * cfg.geometry.ranks_per_channel + d.rank)
    assert used.size == cfg.geometry.total_ranks
    assert placement(cfg, s.table_rows, s.row_bytes).ranks_holding_data(cfg.geometry.total_ranks) == used.size


def test_spread_placement_keeps_distinct_rows_at_distinct_addresses():
    cfg = NmpConfig(geometry=DramGeometry(dimms_per_channel=4))
    rows = np.arange(100_000)
    s = LookupStream.from_arrays(np.zeros(rows.size), rows, rows, [100_000], [128])
    d = map_lookups(cfg, s.tables, s.rows, s.table_rows, s.row_bytes)
    assert np.unique(d.key).size == rows.size  # one table over 32 ranks: no two rows collide
    assert np.unique(d.channel * 8 + d.rank).size == 32


def test_one_table_per_rank_or_more_is_placed_as_before():
    cfg = NmpConfig()  # 8 ranks, 8 tables: one colour each, rows contiguous in that rank
    pl = placement(cfg, np.full(8, 1000), np.full(8, 128))
    assert pl.spread.tolist() == [1] * 8 and pl.colour.tolist() == list(range(8))


@pytest.mark.parametrize("tables", [2, 7])
def test_fast_decoding_agrees_with_numpy_decoding_on_spread_tables(tables):
    cfg = NmpConfig(geometry=DramGeometry(dimms_per_channel=4), fidelity="fast")
    s = _stream(tables)
    d, f = map_lookups(cfg, s.tables, s.rows, s.table_rows, s.row_bytes), map_lookups_fast(cfg, s)
    for name in ("channel", "rank", "bank", "row", "column", "bursts", "key"):
        assert np.array_equal(getattr(d, name), getattr(f, name)), name
