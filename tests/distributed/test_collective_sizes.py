"""Collective stages fitted between two larger calibration plans ("X:mid", "X:big"): a calibration file from them
prices both plans' collective stages as measured, with a fixed part the tiny plan does not show; a file without
the mid plans fits as before (tiny → big)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks import calibrate

LLC = 32 * 2**20
JUMP, BW = 2e-3, 5e8  # made up: each collective stage of a larger plan = 2 ms + its bytes / 0.5 GB/s; tiny: 0.1 ms


def _grid() -> list[dict]:
    pts = []
    for dim in calibrate.DIMS:
        for mult in calibrate.LLC_MULTIPLES:
            rows = calibrate.lookup_rows(dim, mult, LLC, None)
            for access in calibrate.ACCESS:
                for batch in calibrate.BATCHES:
                    p = {"dim": dim, "rows": rows, "table_bytes": rows * dim * 4, "access": access, "batch": batch,
                         "ids": batch * 16.0}
                    ids, near, _ = calibrate.lookup_terms(p, LLC)
                    t = 30e-6 + ids * 2e-9 + near / 100e9
                    p.update(fwd_s=t, train_s=2 * t, bytes=near)
                    pts.append(p)
    return pts


def _round(nbytes: dict[str, dict[str, float]], mid: bool) -> dict:
    """One round, made up: tiny plans 0.1 ms a stage; larger plans' collective stages on the line above, their
    lookup stages 1 ms."""
    comm = {op: [{"sent_bytes": b, "bytes_per_rank": b, "secs": 1e-4 + b / 1e9} for b in (4e3, 6e4, 1e6, 4e6)]
            for op in ("all_to_all", "reduce_scatter", "all_gather", "all_reduce")}
    dense = [{"rows": r, "bytes": r * 256, "secs": 5e-5 + r * 256 / 2e9} for r in calibrate.DENSE_ROWS]
    stages = {k: {s: 1e-4 for s in calibrate.STAGE_KEYS} for k in calibrate.OVERHEAD_PLANS}
    for key, b in nbytes.items():
        if key.endswith(":mid") and not mid:
            continue
        stages[key] = {s: (JUMP + b.get(s, 0.0) / BW if s in calibrate.COLLECTIVE_STAGES else 1e-3)
                       for s in calibrate.STAGE_KEYS}
    return {"lookups": _grid(), "colocated": {"slowdown": 1.1}, "collectives": comm, "dense_optimizer": dense,
            "torchrec_stages_s": stages, "torchrec_step_s": {k: 2e-3 for k in stages},
            "torchrec_gap_s": {k: 1e-3 for k in stages}}


@pytest.fixture(scope="module")
def nbytes() -> dict[str, dict[str, float]]:
    weights = calibrate.fit_rounds([_round({}, False)], 2, LLC)["median"]["lookup_weights"]
    return calibrate.stage_plan_bytes(2, LLC, weights)


@pytest.fixture(scope="module")
def fitted(nbytes: dict[str, dict[str, float]]) -> dict:
    """with and without the mid plans: the topology a calibration of made-up rounds writes (its stage overheads
    and bandwidths on a 2-rank CPU)."""
    from sharding.topology import load_topology

    out = {}
    for mid in (True, False):
        med = calibrate.fit_rounds([_round(nbytes, mid)], 2, LLC)["median"]
        out[mid] = replace(load_topology("dev_2core", ranks=2), stage_overhead=med["stage_overhead"],
                           stage_bandwidth=med["stage_bandwidth"], llc_bytes=float(LLC),
                           lookup_weights=med["lookup_weights"])
    return out


def _priced(topo, kind: str, mid: bool) -> dict[str, float]:
    """The model's collective stages of calibration plan "kind:mid" or "kind:big" on `topo`."""
    from benchmarks.distributed.config import compose_dist
    from embedding.workload_config import build_workload
    from sharding.cost import CostModel
    from sharding.plan import ShardingPlan
    from sharding.workload import PlanWorkload

    overrides, plan = calibrate._overhead_plan(kind, 2, big=True, mid=mid)
    spec = replace(build_workload(compose_dist(overrides).workload), mode="train")
    got = CostModel(PlanWorkload.from_spec(spec), topo).stage_breakdown(ShardingPlan.from_dict(plan))
    return {s: got[s] for s in calibrate.COLLECTIVE_STAGES}


@pytest.mark.parametrize("kind", calibrate.MID_TYPES)
def test_two_larger_sizes_price_both_plans_collectives_as_measured(nbytes, fitted, kind) -> None:
    topo = fitted[True]
    for size in ("mid", "big"):
        want = {s: JUMP + nbytes[f"{kind}:{size}"].get(s, 0.0) / BW for s in calibrate.COLLECTIVE_STAGES}
        assert _priced(topo, kind, size == "mid") == pytest.approx(want, rel=1e-6)
    moved = [s for s in calibrate.COLLECTIVE_STAGES if nbytes[f"{kind}:big"].get(s, 0.0) > 0]
    assert moved and all(topo.stage_bandwidth[kind][s] == pytest.approx(BW) for s in moved)


def test_without_the_mid_plans_collectives_are_fitted_from_the_tiny_plan_as_before(nbytes, fitted) -> None:
    topo = fitted[False]
    b = nbytes["TW:big"]["input_dist"]
    assert topo.stage_bandwidth["TW"]["input_dist"] == pytest.approx(b / (JUMP + b / BW - 1e-4))
    # the tiny plans' fixed part: base = TW + RW − (TW+RW) = 0.1 ms, TW's own = TW − base = 0
    assert topo.stage_overhead["base"]["input_dist"] == pytest.approx(1e-4)
    assert topo.stage_overhead["TW"]["input_dist"] == pytest.approx(0.0)
    # the jump is then priced as bytes: the larger plan right, half its bytes under-priced (and more over-priced)
    assert _priced(topo, "TW", mid=False)["input_dist"] == pytest.approx(1e-4 + JUMP + b / BW - 1e-4)
    assert _priced(topo, "TW", mid=True)["input_dist"] < JUMP + nbytes["TW:mid"]["input_dist"] / BW
