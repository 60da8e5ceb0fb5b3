"""Medians and spreads of figures fitted once per calibration round (`benchmarks.calibrate`).

A calibration measures in interleaved rounds and fits every term on each round's measurements alone; the figure it
writes is each term's median over rounds, so a burst of load from another process moves one round's fit, not the
result. The spread over rounds (min–max) is printed and stored beside each median: how far the figure repeats.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["median_tree", "spread_tree", "rotated", "relative_spread"]


def rotated(items: tuple[str, ...] | list[str], k: int) -> list[str]:
    """`items` started at position k (mod len): round k runs the microbenchmarks in this order, so none is always
    first (after the process starts) or last."""
    items = list(items)
    if not items:
        return items
    k %= len(items)
    return items[k:] + items[:k]


def median_tree(trees: list[dict[str, Any]], missing: float | None = None) -> dict[str, Any]:
    """Per key, the median over `trees` (nested dicts with number leaves, one per round). A key a round lacks
    counts as `missing` (e.g. inf for a stage bandwidth that round saw no growth for; a median that comes out
    non-finite drops the key) or, with `missing=None`, is left out of that key's median."""
    keys = list(dict.fromkeys(k for t in trees for k in t))
    out: dict[str, Any] = {}
    for k in keys:
        vals = [t[k] for t in trees if k in t]
        if vals and isinstance(vals[0], dict):
            subs = [t.get(k, {}) for t in trees] if missing is not None else vals  # a round without it: all missing
            sub = median_tree([v for v in subs if isinstance(v, dict)], missing)
            if sub:
                out[k] = sub
            continue
        nums = [float(v) for v in vals]
        if missing is not None:
            nums += [missing] * (len(trees) - len(nums))
        if not nums:
            continue
        med = float(np.median(nums))
        if math.isfinite(med):
            out[k] = med
    return out


def spread_tree(trees: list[dict[str, Any]]) -> dict[str, Any]:
    """Per number leaf, [min, max] over the rounds that have it (same nesting as the trees)."""
    keys = list(dict.fromkeys(k for t in trees for k in t))
    out: dict[str, Any] = {}
    for k in keys:
        vals = [t[k] for t in trees if k in t]
        if vals and isinstance(vals[0], dict):
            out[k] = spread_tree([v for v in vals if isinstance(v, dict)])
        else:
            nums = [float(v) for v in vals if math.isfinite(float(v))]
            if nums:
                out[k] = [min(nums), max(nums)]
    return out


def relative_spread(values: list[float]) -> float:
    """(max − min) / median of a figure's per-round values: 0 when it repeats exactly."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return float("nan")
    med = float(np.median(vals))
    return (max(vals) - min(vals)) / abs(med) if med else float("inf")
