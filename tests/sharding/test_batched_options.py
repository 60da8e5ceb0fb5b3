"""Every table's options priced at once (`Builder._price_all`, `_mask`, `Resources.shard_many`) give the floats
and the choices of the one-table-at-a-time reference (`_priced_one`, `_feasible_reference`, `Resources.shard`),
bit for bit (issue 16)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sharding import CostModel, load_topology
from sharding.family import instance
from sharding.pack import TWRW, Builder
from sharding.plan import ShardingType
from sharding.search import Resources
from sharding.tablesets import load_tables
from sharding.tiers import assign_tiers
from sharding.trec_cost import TorchRecCostModel
from sharding.workload import PlanWorkload


def _pair(wl: PlanWorkload, topo, scale: tuple[float, float]) -> tuple[Builder, Builder]:  # noqa: ANN001
    """A builder on the batched path and one on its own prices for the reference (nothing shared)."""
    out = []
    for _ in range(2):
        cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
        out.append(Builder(Resources(cost, trec, scale), assign_tiers(cost), 0))
    return out[0], out[1]


def _key(opts: tuple) -> tuple:
    return [(o[0], o[1], o[2].tobytes(), o[3]) for o in opts[0]], opts[1], opts[2], opts[3]


def _cases() -> list[tuple[PlanWorkload, object]]:
    out = []
    for seed in (3, 14, 74, 94):
        inst = instance(seed)
        out.append((inst.workload, inst.topology.reserve_inputs(inst.workload.ids_per_batch)))
    wl = PlanWorkload(load_tables("random:60:3"), 2048)
    out.append((wl, load_topology("dgx_h100_x2", 16)))
    out.append((wl, replace(load_topology("dgx_h100_x2", 16), device="cpu")))  # all-to-alls priced by the mean
    out.append((PlanWorkload(load_tables("random:20:1"), 512, "inference"), load_topology("dgx_h100", 1)))
    return out


@pytest.mark.parametrize("case", range(7))
@pytest.mark.parametrize("scale", [(1e-3, 2e-3), (1e3, 1e-3)])
def test_batched_options_equal_the_reference_bit_for_bit(case: int, scale: tuple[float, float]) -> None:
    wl, topo = _cases()[case]
    fast, ref = _pair(wl, topo, scale)
    assert fast.res.by_mean == (case == 5) and (topo.world_size == 1) == (case == 6)  # the cases they stand for
    assert fast.avg == ref.avg
    for t in wl.tables[:60]:
        got, want = fast._priced(t), ref._priced_one(t)
        assert [(o[0], o[1], o[2].tobytes(), o[3], o[4], o[5]) for o in got] == \
               [(o[0], o[1], o[2].tobytes(), o[3], o[4], o[5]) for o in want]
        v, m = ref.shard(t, TWRW, t.rows // 3, t.dim)  # the shard vectors themselves
        v2, m2 = fast.res.shard_many([(t, TWRW, t.rows // 3, t.dim, *fast.tiers[t.name])])[0]
        assert v.tobytes() == v2.tobytes() and m == m2
        for mu, allow_dp in ((1.0, True), (0.5, False), (0.25, True), (0.0, True)):
            for trec in (False, True):
                assert _key(fast._feasible(t, mu, allow_dp, trec)) == _key(ref._feasible_reference(t, mu, allow_dp,
                                                                                                     trec))
            for torchrec_columns in (False, True):
                fast.torchrec_columns = ref.torchrec_columns = torchrec_columns
                ref_choose = Builder.choose.__get__(ref)
                ref._feasible = lambda t, mu, dp, trec=False: ref._feasible_reference(t, mu, dp, trec)  # noqa: B023
                ref._torchrec_feasible = lambda t, mu, dp: ref._feasible_reference(t, mu, dp, True)  # noqa: B023
                for theta, least, twrw, uniform in ((0.0, True, False, None), (1.5, False, False, None),
                                                    (0.7, 2, False, None), (1.0, False, True, None),
                                                    (1.0, 3, False, None), (1.0, False, True, TWRW),
                                                    (0.25, False, False, None)):
                    assert fast.choose(t, theta, mu, allow_dp, least, twrw, uniform) == \
                        ref_choose(t, theta, mu, allow_dp, least, twrw, uniform)


def test_shard_many_fills_the_memo_shard_reads() -> None:
    wl = PlanWorkload(load_tables("random:12:2"), 1024)
    topo = load_topology("dgx_h100_x2", 16)
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    res = Resources(cost, trec, (1.0, 1.0))
    keys = [(t, st, t.rows // d, t.dim // d, "hbm", 0.0) for t in wl.tables for st in (TWRW,) for d in (1, 2)]
    got = res.shard_many(keys + keys[:3])
    assert len(got) == len(keys) + 3 and all(res.shard(*k) is g for k, g in zip(keys, got, strict=False))
    assert all(isinstance(v, np.ndarray) and v.shape == (res.K,) for v, _ in got)


@pytest.mark.parametrize("case", range(7))
@pytest.mark.parametrize("scale", [(1e-3, 2e-3), (1e3, 1e-3)])
def test_choose_all_equals_choose_on_every_table(case: int, scale: tuple[float, float]) -> None:
    """The compiled pass (`choose_all`) picks what `choose` picks, table by table, for every argument mix the
    optimizer uses (and a few more), with and without TorchRec's column blocks."""
    wl, topo = _cases()[case]
    fast, ref = _pair(wl, topo, scale)
    checked = 0
    for torchrec_columns in (False, True):
        fast.torchrec_columns = ref.torchrec_columns = torchrec_columns
        for mu, allow_dp in ((1.0, True), (0.5, False), (0.25, True), (0.1, False), (0.0, True)):
            for theta, least, twrw, uniform in ((0.0, True, False, None), (1.5, False, False, None),
                                                (0.5, False, True, None), (0.7, 2, False, None),
                                                (1.0, False, True, None), (1.0, 3, False, None),
                                                (1.0, True, False, TWRW), (1.0, False, True, TWRW),
                                                (1.0, False, False, ShardingType.ROW_WISE),
                                                (0.25, False, False, None), (0.25, True, False, None)):
                got = fast.choose_all(theta, mu, allow_dp, least, twrw, uniform)
                assert list(got) == [t.name for t in wl.tables]
                assert got == {t.name: ref.choose(t, theta, mu, allow_dp, least, twrw, uniform) for t in wl.tables}
                checked += len(got)
    assert checked == 2 * 5 * 11 * len(wl.tables)


@pytest.mark.parametrize("case", [0, 3, 5, 6])
def test_a_builder_of_another_scale_sharing_the_option_arrays_prices_and_chooses_as_its_own(case: int) -> None:
    """`Resources.option_arrays` (what does not depend on the scales) shared with a builder of another scale
    gives that builder the floats and choices it computes alone."""
    wl, topo = _cases()[case]
    first = _pair(wl, topo, (1e3, 1e-3))[0]
    first._price_all()
    other = Builder(Resources(first.cost, first.res.trec, (1e-3, 2e-3), first.res), first.tiers, 0)
    alone = _pair(wl, topo, (1e-3, 2e-3))[1]
    assert other._batch is not first._batch and other.res.option_arrays is first.res.option_arrays
    for t in wl.tables:
        assert [(o[0], o[1], o[2].tobytes(), o[3], o[4], o[5]) for o in other._priced(t)] == \
               [(o[0], o[1], o[2].tobytes(), o[3], o[4], o[5]) for o in alone._priced_one(t)]
    for args in ((0.5, 1.0, True, False, True), (0.0, 1.0, True, True, False), (1.0, 0.25, False, 2, False)):
        assert other.choose_all(*args) == {t.name: alone.choose(t, *args) for t in wl.tables}
