"""The bound's tier penalty (`bounds._tier_penalty`): its segments from one compiled hull pass over every table
(`_penalty_segments`, `_hull_rows`) against the per-table Python loop they replace, bit for bit."""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from embedding.spec import DTYPE_BYTES, AccessSpec
from sharding import CostModel
from sharding.bounds import (
    _GRID,
    TW,
    _demotion_seconds,
    _hull_rows,
    _hull_segments,
    _penalty_segments,
    _tier_penalty,
)
from sharding.family import instance


def _hex(pairs) -> list[tuple[str, str]]:
    return [(float(a).hex(), float(b).hex()) for a, b in pairs]


def _former_segments(cost: CostModel, per_byte: float) -> list[tuple[float, float]]:
    """`_tier_penalty`'s former per-table loop (one `_hull_segments` per table)."""
    segments: list[tuple[float, float]] = []
    for t in cost.workload.tables:
        lookups = cost._traffic(t, TW, t.rows)[0]
        k = lookups * t.dim * DTYPE_BYTES[t.dtype] * per_byte
        pen = np.array([k * cost.miss_rate(t, 1 - x) for x in _GRID])
        xs = np.concatenate([[0.0], _GRID[1:]]) * t.bytes
        ys = np.concatenate([[0.0], pen[:-1]])
        segments.extend(_hull_segments(xs, ys))
    return segments


def _random_rows(rng: random.Random, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of points, xs ascending: integer steps and values (collinear points, equal slopes) or random floats,
    ys non-decreasing or not."""
    xs, ys = np.empty((n, m)), np.empty((n, m))
    for i in range(n):
        ints = rng.random() < 0.5
        step = (lambda: float(rng.randint(1, 3))) if ints else (lambda: rng.uniform(1e-3, 5.0))
        val = (lambda: float(rng.randint(0, 4))) if ints else (lambda: rng.uniform(0.0, 10.0))
        x, y = rng.uniform(-2, 2), 0.0
        for j in range(m):
            x += step()
            y = y + val() if rng.random() < 0.7 else val()
            xs[i, j], ys[i, j] = x * 1e9 if rng.random() < 0.1 else x, y
        xs[i].sort()
    return xs, ys


def test_hull_rows_are_the_hull_segments_bit_for_bit() -> None:
    rng = random.Random(17)
    for _ in range(200):
        xs, ys = _random_rows(rng, rng.randint(1, 6), rng.choice([1, 2, 3, 5, 41]))
        width, slope = _hull_rows(xs, ys)
        want = [s for x, y in zip(xs, ys, strict=True) for s in _hull_segments(x, y)]
        assert _hex(zip(width.tolist(), slope.tolist(), strict=True)) == _hex(want)
    xs, ys = np.zeros((1, 3)), np.array([[0.0, 1.0, 2.0]])  # a zero width: both raise
    with pytest.raises(ZeroDivisionError):
        _hull_segments(xs[0], ys[0])
    with pytest.raises(ZeroDivisionError):
        _hull_rows(xs, ys)


def _curves(wl, rng: random.Random) -> dict:
    """Measured miss curves for some tables: arrays (not convex) and callables."""
    out = {}
    for t in wl.tables:
        u = rng.random()
        if u < 0.3:
            xs = np.linspace(0.0, 1.0, 7)
            out[t.name] = (xs, np.clip(1.0 - xs ** rng.uniform(0.3, 2.0) + rng.uniform(-0.05, 0.05), 0, 1))
        elif u < 0.5:
            a = rng.uniform(0.5, 3.0)
            out[t.name] = lambda f, a=a: (1.0 - f) ** a
    return out


@pytest.mark.parametrize("seed", [0, 11, 18, 27, 54, 73, 88])
def test_penalty_segments_are_the_former_per_table_loop_bit_for_bit(seed) -> None:
    """Family instances whose weights overflow the fast tier (f88 does not: its segments are still compared),
    with the model's own miss rates (Zipf: `zipf_miss_rates`; uniform tables) and with measured curves."""
    inst = instance(seed)
    rt = inst.topology.reserve_inputs(inst.workload.ids_per_batch)
    wl = inst.workload  # the family's tables are Zipf: a third of them uniform too (`miss_rate`'s other branch)
    mixed = replace(wl, tables=tuple(replace(t, access=AccessSpec("uniform")) if i % 3 == 1 else t
                                     for i, t in enumerate(wl.tables)))
    for w, curves in ((wl, None), (wl, _curves(wl, random.Random(seed))), (mixed, None)):
        cost = CostModel(w, rt, curves)
        if len(rt.tiers) < 2:
            continue
        per_byte = sum(_demotion_seconds(cost))
        got, want = _penalty_segments(cost, per_byte), _former_segments(cost, per_byte)
        assert _hex(got) == _hex(want) and len(got) >= len(w.tables)
    assert _tier_penalty(CostModel(inst.workload, rt)) > 0 or seed == 88


def test_zipf_miss_rates_are_zipf_miss_rate_bit_for_bit() -> None:
    """`zipf_miss_rates` against `zipf_miss_rate` share by share: the grid's kept shares and random ones (0 and
    1 included), tables from 1 row (f·rows < 1) to 10^10, α = 1 (the logarithm) and others."""
    from sharding.cost import zipf_miss_rate
    from sharding.cost import zipf_miss_rates as _zipf_miss_rates
    rng = np.random.default_rng(17)
    grid = [1 - x for x in _GRID]
    for case in range(300):
        rows = int(10 ** rng.uniform(0, 10)) if case % 3 else int(rng.integers(1, 1200))
        alpha = float(rng.choice([1.0, 1.0 + 1e-10, rng.uniform(0.3, 2.5)]))
        shares = grid if case % 2 else list(np.concatenate([[0.0, 1.0], rng.random(20)]))
        want = [zipf_miss_rate(rows, alpha, f) for f in shares]
        got = _zipf_miss_rates(rows, alpha, shares)
        assert _hex(zip(got.tolist(), want, strict=True)) == _hex(zip(want, want, strict=True))

