"""Issue 16 (brief i16c): the simple bound's per-table terms, read from the models' memos over `_option_shards`, are
the former terms float for float; and no compiled kernel of `sharding` waits for its first call to compile."""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace

import numba
import numpy as np
import pytest

import sharding
from sharding import CostModel, PlanWorkload, load_topology, lower_bound, optimize
from sharding.bounds import _all_table_terms, _cheapest_tiers, _option_shards, _table_terms
from sharding.layouts import column_splits, row_sizes
from sharding.plan import ShardingType
from sharding.tablesets import load_tables
from sharding.trec_cost import TorchRecCostModel

TW, CW, RW, TWRW, DP = (ShardingType.TABLE_WISE, ShardingType.COLUMN_WISE, ShardingType.ROW_WISE,
                        ShardingType.TABLE_ROW_WISE, ShardingType.DATA_PARALLEL)


def _former_table_terms(cost, name: str, tiers: list[str]) -> tuple[float, float, float, float]:  # noqa: ANN001
    """`bounds._table_terms` as it was: each option priced through `shard_cost`, TWRW before RW."""
    t, topo = cost.tables[name], cost.topology
    w, h = topo.world_size, min(topo.ranks_per_host, topo.world_size)
    one = tiers[0] if len(tiers) == 1 else None
    spread = isinstance(cost, CostModel) and cost.topology.all_to_all_by_mean and w > 1

    def price(st: ShardingType, rows: int, cols: int) -> tuple[float, float]:
        c = (cost.shard_cost(t, st, rows, cols, one).total if one is not None else
             min(cost.shard_cost(t, st, rows, cols, x).total for x in tiers))
        if not spread:
            return c, c
        a2a = sum(secs for _, op, secs in cost.message_times(t, st, rows, cols) if op == "all_to_all")
        return c, max(0.0, c - a2a * (1 - 1 / w))

    work, piece = price(TW, t.rows, t.dim)
    for k in [k for k in column_splits(t.dim) if k <= w]:
        c, cp = price(CW, t.rows, t.dim // k)
        work, piece = min(work, c * k), min(piece, cp)
    for st, n in ((TWRW, h), (RW, w)):
        cs = [(*price(st, r, t.dim), k) for r, k in row_sizes(t.rows, n)]
        work, piece = min(work, sum(c * k for c, _, k in cs)), min(piece, max(cp for _, cp, _ in cs))
    dp, dp_piece = price(DP, t.rows, t.dim)
    return min(work, dp * w), min(piece, dp_piece), work, piece


@pytest.mark.parametrize("tables, hardware, ranks, device, mode", [
    ("random:60:1", "torchrec_default", 32, None, "train"), ("random:40:2", "dgx_h100_x2", 16, None, "inference"),
    ("random:30:3", "dev_2core", 2, None, "train"), ("random:50:4", "h200_x8", 8, "cpu", "train")])
def test_the_bounds_table_terms_are_the_former_ones_float_for_float(tables: str, hardware: str, ranks: int,
                                                                    device: str | None, mode: str) -> None:
    topo = load_topology(hardware, ranks)
    if device is not None:  # CPU ranks: all-to-alls priced by the mean (the terms' `spread` path)
        topo = replace(topo, device=device)
    wl = PlanWorkload(load_tables(tables), 512, mode)
    for make in (CostModel, TorchRecCostModel):
        fresh, former = make(wl, topo), make(wl, topo)
        lb = lower_bound(fresh, relax=False)  # prices every option (`price_many`), then reads the memo
        tiers = _cheapest_tiers(fresh)
        for t in wl.tables:
            assert _table_terms(fresh, t.name, tiers) == _former_table_terms(former, t.name, tiers), t.name
        if make is CostModel:
            assert lb.value > 0 and lb == replace(lower_bound(former, relax=False))


@pytest.mark.parametrize("tables, hardware, ranks, device, mode", [
    ("random:60:1", "torchrec_default", 32, None, "train"), ("random:40:2", "dgx_h100_x2", 16, None, "inference"),
    ("random:30:3", "dev_2core", 2, None, "train"), ("random:50:4", "h200_x8", 8, "cpu", "train"),
    ("random:80:6", "torchrec_default", 64, None, "train")])
def test_every_tables_terms_in_one_pass_are_the_per_table_terms_bit_for_bit(tables: str, hardware: str, ranks: int,
                                                                         device: str | None, mode: str) -> None:
    """`_all_table_terms` (one pass over every table's shapes) gives `_table_terms`' floats bit for bit, whether
    the memo holds the prices (`price_many`, as `lower_bound` calls it) or not (shapes priced on the way)."""
    topo = load_topology(hardware, ranks)
    if device is not None:
        topo = replace(topo, device=device)
    wl = PlanWorkload(load_tables(tables), 512, mode)
    for make in (CostModel, TorchRecCostModel):
        for priced in (True, False):
            fresh, former = make(wl, topo), make(wl, topo)
            tiers = _cheapest_tiers(fresh)
            options = [_option_shards(fresh, t) for t in wl.tables]
            if priced:
                fresh.price_many([(t, st, r, c, x, 0.0) for t, opts in zip(wl.tables, options, strict=True)
                                  for st, shards in opts for r, c, _ in shards for x in tiers])
            got = _all_table_terms(fresh, tiers, options)
            expect = [_table_terms(former, t.name, tiers, opts) for t, opts in zip(wl.tables, options, strict=True)]
            assert np.array(got).tobytes() == np.array(expect).tobytes()


def test_no_kernel_of_sharding_compiles_at_its_first_call_in_a_plan() -> None:
    """Every compiled kernel the optimizer calls is compiled when its module is imported (from numba's disk
    cache): one compiled at its first call cost the first plan of a process 0.23 s (f94)."""
    mods = [importlib.import_module(f"sharding.{m.name}") for m in pkgutil.iter_modules(sharding.__path__)]

    def signatures() -> dict[tuple[str, str], int]:
        return {(m.__name__, n): len(f.signatures) for m in mods for n, f in vars(m).items()
                if isinstance(f, numba.core.registry.CPUDispatcher)}

    before = signatures()
    assert before
    wl = PlanWorkload(load_tables("random:24:5"), 512, "train")
    optimize(wl, load_topology("torchrec_default", 16, 8))
    assert signatures() == before
