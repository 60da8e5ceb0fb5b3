"""Counted work, not the clock, decides a plan: the same input gives the same plan with every clock that Python
code can read made to run 1000× slower or 1000× faster (a slow or loaded machine, a fast one)."""
from __future__ import annotations

import time

import pytest

from sharding import PlanWorkload, load_topology, optimize
from sharding.optimizer import OptimizeStats
from sharding.plan import ShardingPlan
from sharding.tablesets import load_tables

CLOCKS = ("perf_counter", "time", "monotonic", "process_time")


def _layout(plan: ShardingPlan) -> dict:
    return {name: (tp.sharding_type, tp.shards) for name, tp in sorted(plan.tables.items())}


def _plan_with_clock(monkeypatch: pytest.MonkeyPatch, factor: float, wl: PlanWorkload, topo,
                     stats: OptimizeStats, anneal: int) -> dict:
    with monkeypatch.context() as m:
        for name in CLOCKS:
            real = getattr(time, name)
            origin = real()
            m.setattr(time, name, lambda real=real, origin=origin: origin + (real() - origin) * factor)
        return _layout(optimize(wl, topo, stats=stats, anneal=anneal))


# a small instance with the opt-in long search (the node-limited MILP step, then annealing), and one large
# enough for the short anneal of the default search
@pytest.mark.parametrize(("tables", "ranks", "anneal"), [("random:8:3", 4, 1), ("random:160:1", 16, 0)])
def test_the_plan_is_the_same_under_a_slow_and_a_fast_clock(monkeypatch: pytest.MonkeyPatch, tables: str,
                                                           ranks: int, anneal: int) -> None:
    wl = PlanWorkload(load_tables(tables), 4096)
    topo = load_topology("dgx_h100", ranks)
    plans, stats = [], []
    for factor in (1.0, 1000.0, 0.001):
        s = OptimizeStats()
        plans.append(_plan_with_clock(monkeypatch, factor, wl, topo, s, anneal))
        stats.append(s)
    assert plans[0] == plans[1] == plans[2]
    assert stats[0].chosen == stats[1].chosen == stats[2].chosen
    if anneal:  # the exact step ran (not skipped) and explored the same nodes each time
        assert stats[0].milp is not None and stats[0].milp.status != "skipped"
        assert stats[0].milp.nodes == stats[1].milp.nodes == stats[2].milp.nodes


_HASHSEED_SCRIPT = """
import hashlib
from sharding import PlanWorkload, load_topology, optimize
from sharding.cost import CostModel
from sharding.search import Resources, STYPES
from sharding.tablesets import load_tables
from sharding.trec_cost import TorchRecCostModel
wl, topo = PlanWorkload(load_tables("random:40:2"), 4096), load_topology("torchrec_default", 16, 8)
cost, trec = CostModel(wl, topo), TorchRecCostModel(wl, topo)
const = Resources(cost, trec, (1.0, 1.0)).const(set(STYPES))
plan = optimize(wl, topo)
layout = repr({n: (tp.sharding_type, tp.shards) for n, tp in sorted(plan.tables.items())})
print(const.hex(), hashlib.sha1(layout.encode()).hexdigest())
"""


def test_the_plan_and_the_fixed_cost_do_not_change_with_pythonhashseed() -> None:
    """Sets of sharding types (a str Enum) iterate in an order that PYTHONHASHSEED changes from one process to the
    next; no sum, and so no plan, may follow it."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)}
        got = subprocess.run([sys.executable, "-c", _HASHSEED_SCRIPT], env=env, cwd=root, capture_output=True,
                             text=True, check=True)
        out.add(got.stdout.strip())
    assert len(out) == 1, out
