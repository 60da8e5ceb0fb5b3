"""The tiering (`sharding.tiers.assign_tiers`): the greedy demotion steps, then the steps taken back where the
fast tier still fits (`_undo`)."""
from __future__ import annotations

import pytest

import sharding.tiers as tiers_mod
from embedding.spec import AccessSpec, PoolingSpec, TableSpec
from sharding import CostModel, PlanWorkload, load_topology
from sharding.family import instance
from sharding.tiers import CACHE_LEVELS, _held, assign_tiers


def _level(tiers: dict[str, tuple[str, float]], fast: str, name: str) -> int:
    tier, fraction = tiers[name]
    return 0 if tier == fast else CACHE_LEVELS.index(fraction)


def _greedy_only(cost: CostModel, monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[str, float]]:
    with monkeypatch.context() as m:
        m.setattr(tiers_mod, "_undo", lambda cost, levels, state, demand, cap: demand)
        return assign_tiers(cost)


def _overshoot_case() -> CostModel:
    """Small cold tables that are cheap to demote per byte, and one large hot table whose first steps free far
    more than the small ones did: the greedy demotes the small ones first, then needs the large one anyway."""
    small = tuple(TableSpec(f"s{i}", 2_000_000, 64, pooling=PoolingSpec("fixed", 1.0),
                            access=AccessSpec("zipf", 1.2)) for i in range(4))
    big = TableSpec("big", 60_000_000, 128, pooling=PoolingSpec("fixed", 40.0), access=AccessSpec("zipf", 1.0))
    wl = PlanWorkload((big, *small), 4096)
    topo = load_topology("torchrec_default", 4, 4, 6.0).reserve_inputs(wl.ids_per_batch)
    return CostModel(wl, topo)


@pytest.mark.parametrize("case", ["synthetic", 64, 54, 89, 6])
def test_taken_back_steps_never_demote_more_and_leave_no_step_that_fits(case, monkeypatch) -> None:  # noqa: ANN001
    if case == "synthetic":
        cost = _overshoot_case()
    else:
        inst = instance(case)
        cost = CostModel(inst.workload, inst.topology.reserve_inputs(inst.workload.ids_per_batch))
    topo, fast = cost.topology, cost.topology.fast.name
    greedy, got = _greedy_only(cost, monkeypatch), assign_tiers(cost)
    cap = topo.usable(fast) * topo.world_size * 0.92
    names = [t.name for t in cost.workload.tables]
    level = {n: _level(got, fast, n) for n in names}
    assert all(level[n] <= _level(greedy, fast, n) for n in names)  # only steps back up
    held = sum(_held(cost, n, level[n]) for n in names)
    greedy_held = sum(_held(cost, n, _level(greedy, fast, n)) for n in names)
    assert held <= max(cap, greedy_held) * (1 + 1e-12)  # the room the packings need is kept
    if held <= cap:  # maximal: no single step back up still fits
        for n in names:
            if level[n] > 0:
                assert held - _held(cost, n, level[n]) + _held(cost, n, level[n] - 1) > cap * (1 - 1e-12), n


def test_the_greedy_overshoot_is_taken_back(monkeypatch) -> None:  # noqa: ANN001
    cost = _overshoot_case()
    fast = cost.topology.fast.name
    greedy, got = _greedy_only(cost, monkeypatch), assign_tiers(cost)
    assert any(greedy[f"s{i}"][0] != fast for i in range(4))  # the case does what it says
    assert all(got[f"s{i}"][0] == fast for i in range(4))
    assert got["big"][0] != fast
    inst = instance(64)  # 87 tables × 8 ranks, memory-tight: TorchRec's plan keeps only t0 in DDR; so does ours now
    cost = CostModel(inst.workload, inst.topology.reserve_inputs(inst.workload.ids_per_batch))
    assert [n for n, (tier, _) in assign_tiers(cost).items() if tier != fast] == ["t0"]
