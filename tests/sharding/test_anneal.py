"""The opt-in long search (`sharding.anneal`): annealed plans are valid, cost less by our model, keep TorchRec's
per-rank maximum within the cap, and are the same for the same seed; the bound MILP's types pack into a valid plan;
`optimize(anneal=…)` keeps the pick's guarantees."""
from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sharding import BASELINES, CostModel, PlanError, PlanWorkload, load_topology, optimize, validate_plan
from sharding.anneal import anneal_plan, milp_types, seeded_builder
from sharding.optimizer import OptimizeStats
from sharding.pack import NoFit
from sharding.tablesets import load_tables
from sharding.trec_cost import TorchRecCostModel
from tests.sharding.conftest import tables, topologies
from tests.sharding.test_lns import _setup, _with_overheads


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(min_count=2, max_count=16), topologies(), st.sampled_from(["pack", "round_robin", "random"]),
       st.integers(0, 3))
def test_annealed_plans_are_valid_cheaper_and_within_the_cap(ts, topo, start, seed) -> None:
    wl = PlanWorkload(ts, 512, "train")
    cost, trec, b = _setup(wl, topo)
    try:
        plan = b.pack(0.5, 0.5, True, False) if start == "pack" else BASELINES[start](wl, topo)
    except (NoFit, PlanError):
        return
    cap = trec.plan_cost(plan)
    got = anneal_plan(b.res, plan, 30_000, seed=seed)
    event("annealed" if got is not None else "left as is")
    if got is None:
        return
    validate_plan(got, wl, topo, cost)
    assert cost.plan_cost(got) < cost.plan_cost(plan)
    assert trec.plan_cost(got) <= cap * (1 + 1e-9)
    assert {n: tp.sharding_type for n, tp in got.tables.items()} == {n: tp.sharding_type for n, tp in plan.tables.items()}
    again = anneal_plan(b.res, plan, 30_000, seed=seed)
    assert again is not None and again.to_dict() == got.to_dict()


def test_topologies_with_per_holder_costs_are_left_to_the_fast_search() -> None:
    wl = PlanWorkload(load_tables("random:20:2"), 512, "train")
    topo = _with_overheads(load_topology("dgx_h100", 8))
    _, _, b = _setup(wl, topo)
    assert anneal_plan(b.res, b.pack(0.5, 0.5, True, False), 10_000) is None


def test_the_bound_milps_types_pack_into_a_valid_plan() -> None:
    wl = PlanWorkload(load_tables("random:40:4"), 512, "train")
    topo = load_topology("dgx_h100_x2", 16)
    cost, _, b = _setup(wl, topo)
    choice = milp_types(b.res)
    assert choice is not None and set(choice) == {t.name for t in wl.tables}
    plan = seeded_builder(b, choice).pack(1.0, 0.5, True, False)
    validate_plan(plan, wl, topo, cost)
    assert {n: tp.sharding_type for n, tp in plan.tables.items()} == {n: c[0] for n, c in choice.items()}


def test_optimize_with_annealing_keeps_the_picks_guarantees() -> None:
    wl = PlanWorkload(load_tables("random:100:1"), 512, "train")
    topo = load_topology("dgx_h100_x2", 16)
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    fast_stats, stats = OptimizeStats(), OptimizeStats()
    fast = optimize(wl, topo, stats=fast_stats)
    slow = optimize(wl, topo, stats=stats, anneal=2)
    validate_plan(slow, wl, topo, cost)
    assert cost.plan_cost(slow) <= cost.plan_cost(fast) * (1 + 1e-12)
    pick_rating = max(b for lab, _, b in fast_stats.candidates if fast_stats.chosen.startswith(lab))
    assert trec.plan_cost(slow) <= pick_rating * (1 + 1e-9)
    assert any(lab.endswith("+ anneal (probe)") for lab, _, _ in stats.candidates)  # the step ran


def test_the_fast_path_anneals_the_pick_and_keeps_its_guarantees(monkeypatch) -> None:  # noqa: ANN001
    """The pick gets `ANNEAL_WORK` proposals per table: the plan is valid, costs less than the same run without
    them, and TorchRec rates it no worse than that run's pick."""
    import sharding.optimizer as opt
    wl = PlanWorkload(load_tables("random:200:3"), 512, "train")
    topo = load_topology("dgx_h100_x2", 16)
    cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
    stats = OptimizeStats()
    plan = optimize(wl, topo, stats=stats)
    validate_plan(plan, wl, topo, cost)
    assert stats.chosen.endswith("M"), stats.chosen  # "+ anneal 0.24M": the anneal improved the pick
    monkeypatch.setattr(opt, "ANNEAL_WORK", 0)  # the same run without the short anneal
    base_stats = OptimizeStats()
    base = optimize(wl, topo, stats=base_stats)
    assert not base_stats.chosen.endswith("M")
    assert cost.plan_cost(plan) < cost.plan_cost(base)
    picked = stats.chosen.split(" + ")[0]  # the pick, before the steps that may replace it (pairs, anneal)
    rating = next(b for label, _, b in stats.candidates if label == picked)
    assert base_stats.chosen.split(" + ")[0] == picked
    assert trec.plan_cost(plan) <= rating * (1 + 1e-12)


def test_the_kernels_max_holder_is_the_first_rank_holding_each_rows_maximum() -> None:
    """`_holder` keeps, across accepted proposals, the rank the kernel draws pieces from: the first rank holding
    the row's maximum (`np.argmax`), or −1 where only a scan can tell; ties are frequent (small integer loads)."""
    import numpy as np

    from sharding.anneal import _holder

    rng = np.random.default_rng(0)
    scans = 0
    for _ in range(200):
        w = int(rng.integers(2, 12))
        A = rng.integers(0, 4, size=(3, w)).astype(float)
        hold = [int(np.argmax(A[k])) for k in range(3)]
        for _ in range(30):
            a, b = (int(x) for x in rng.choice(w, 2, replace=False))
            d = rng.integers(-2, 3, size=3).astype(float)
            old = A.max(axis=1)
            A[:, a] += d
            A[:, b] -= d
            for k in range(3):
                hold[k] = _holder(A, k, hold[k], float(old[k]), a, b)
                if hold[k] < 0:
                    scans += 1
                    hold[k] = int(np.argmax(A[k]))
                assert hold[k] == int(np.argmax(A[k]))
    assert 0 < scans < 200 * 30 * 3 / 2  # both paths taken; most updates need no scan


def test_the_compiled_replay_of_the_best_placement_equals_the_numpy_loop() -> None:
    """`anneal._replay` (each stage's start from the best placement so far) makes the same floats as its numpy
    reference, on random loads with pieces moved, staying and swapped."""
    import numpy as np

    from sharding.anneal import _replay, _replay_reference
    rng = np.random.default_rng(3)
    for P, K, W, T in ((1, 1, 2, 1), (40, 4, 16, 2), (300, 6, 64, 3)):
        A, tr, used = rng.random((K, W)), rng.random(W), rng.random((T, W))
        V, vt, M = rng.random((P, K)), rng.random(P), rng.random((P, T))
        R, to = rng.integers(0, W, P), rng.integers(0, W, P)
        to[::3] = R[::3]
        got, ref = (A.copy(), tr.copy(), used.copy()), (A.copy(), tr.copy(), used.copy())
        _replay(*got, V, vt, M, R, to)
        _replay_reference(*ref, V, vt, M, R, to)
        assert all(np.array_equal(x, y) for x, y in zip(got, ref, strict=True))
        assert P == 1 or not np.array_equal(got[0], A)
