"""The greedy and round-robin baselines placed in one compiled loop (`baselines._place_all`), and the random one
with its ranks with room compiled (`_place_random`), give the plans of the one-table-at-a-time path
(`_greedy_reference`, `_round_robin_reference`, `_random_reference`), also where tables spill to a slower tier or
fit nowhere (the same error)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from sharding import PlanError, PlanWorkload, load_topology
from sharding.baselines import (
    GREEDY_KEYS,
    _greedy_reference,
    _random_reference,
    _round_robin_reference,
    greedy_plan,
    random_plan,
    round_robin_plan,
)
from sharding.family import instance
from sharding.tablesets import load_tables


def _cases() -> list[tuple[PlanWorkload, object]]:
    out = [(instance(s).workload, instance(s).topology) for s in (3, 41, 94)]
    wl = PlanWorkload(load_tables("random:300:2"), 512, "train")
    out.append((wl, load_topology("torchrec_default", 32, 8)))
    topo = load_topology("dgx_h100_x2", 16)
    fast = topo.tiers[0]
    out.append((wl, replace(topo, tiers=(replace(fast, capacity=fast.capacity // 10), *topo.tiers[1:]))))
    return out


@pytest.mark.parametrize("case", range(5))
def test_compiled_baselines_equal_the_reference(case: int) -> None:
    wl, topo = _cases()[case]
    def run(fn, *args):  # noqa: ANN001, ANN202
        try:
            return fn(wl, topo, *args).to_dict()
        except PlanError as e:
            return str(e)

    got = [run(greedy_plan, k) for k in GREEDY_KEYS] + [run(round_robin_plan)]
    want = [run(_greedy_reference, k) for k in GREEDY_KEYS] + [run(_round_robin_reference)]
    assert len(got) == 4 and got == want
    if case == 4:  # the fastest tier cut to 1/10: tables spill to the next tier down, or fit nowhere
        assert "'ddr'" in str(got) and any(isinstance(p, str) for p in got)


@pytest.mark.parametrize("case", range(5))
def test_random_baseline_equals_the_reference(case: int) -> None:
    """`random_plan` (the fastest tier's ranks with room from the compiled `fit_ranks`) draws the ranks
    `_random_reference` (`_place` per table) draws, for several seeds, also where tables spill or fit nowhere."""
    wl, topo = _cases()[case]
    def run(fn, seed):  # noqa: ANN001, ANN202
        try:
            return fn(wl, topo, seed).to_dict()
        except PlanError as e:
            return str(e)

    got = [run(random_plan, s) for s in (0, 1, 7)]
    assert got == [run(_random_reference, s) for s in (0, 1, 7)]
    if case == 4:
        assert "'ddr'" in str(got)


def test_choice_draws_integers() -> None:
    """`_place_random` draws `rng.integers(0, k)` for `rng.choice` of k ranks: the same stream, draw for draw."""
    import numpy as np
    ks = np.random.default_rng(3).integers(1, 600, 5000).tolist()
    a, b = np.random.default_rng(11), np.random.default_rng(11)
    got = [int(np.arange(k)[a.integers(0, k)]) for k in ks]
    assert got == [int(b.choice(np.flatnonzero(np.ones(k, bool)))) for k in ks]


@pytest.mark.parametrize("case", range(5))
def test_baselines_sharing_a_model_equal_the_reference(case: int) -> None:
    """With one model shared (as the optimizer passes it, its memo filled by the baselines before), the plans are
    the reference's, built with fresh models."""
    from sharding import CostModel
    from sharding.baselines import BASELINES
    wl, topo = _cases()[case]
    rt = topo.reserve_inputs(wl.ids_per_batch)
    cost = CostModel(wl, rt)
    def run(fn, *args, **kw):  # noqa: ANN001, ANN202
        try:
            return fn(wl, rt, *args, **kw).to_dict()  # the reserved topology, as the optimizer passes it
        except PlanError as e:
            return str(e)

    got = [run(BASELINES[f"greedy_{k}"], cost=cost) for k in GREEDY_KEYS]
    got += [run(BASELINES["round_robin"], cost=cost), run(BASELINES["random"], cost=cost)]
    want = [run(_greedy_reference, k) for k in GREEDY_KEYS] + [run(_round_robin_reference), run(_random_reference)]
    assert got == want
