"""Timing: warm-up kept out, repeats, median and spread; CUDA events on the GPU."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Timing", "time_calls"]


@dataclass(frozen=True)
class Timing:
    seconds: np.ndarray  # one entry per timed call
    clock: str

    @property
    def median(self) -> float:
        return float(np.median(self.seconds))

    @property
    def p90(self) -> float:
        return float(np.percentile(self.seconds, 90))

    def summary(self) -> dict:
        s = self.seconds
        return {"median": self.median, "p90": self.p90, "min": float(s.min()), "max": float(s.max()),
                "repeats": int(s.size)}


def time_calls(fn: Callable[[int], object], n_inputs: int, warmup: int, repeats: int,
               device: torch.device) -> Timing:
    """Call fn(i) for i cycling over n_inputs: `warmup` calls untimed, then `repeats` timed calls, each timed on its
    own (perf_counter on CPU; CUDA events on the GPU, synchronised once at the end)."""
    for k in range(warmup):
        fn(k % n_inputs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(repeats)]
        for k, (start, end) in enumerate(events):
            start.record()
            fn(k % n_inputs)
            end.record()
        torch.cuda.synchronize(device)
        secs = np.array([s.elapsed_time(e) / 1e3 for s, e in events])
        return Timing(secs, "cuda events")
    secs = np.empty(repeats)
    clock = time.perf_counter
    for k in range(repeats):
        t0 = clock()
        fn(k % n_inputs)
        secs[k] = clock() - t0
    return Timing(secs, "time.perf_counter")


def rate_metric(name: str, amount: float | np.ndarray, timing: Timing, unit: str, method: str,
                scale: float = 1.0) -> dict:
    """Rate = amount / seconds of each timed call (amount may vary per call: an array cycling like the inputs);
    value is the median rate, p90 the rate that 90% of calls reached (10th percentile), min and max the extremes."""
    secs = timing.seconds
    amounts = np.resize(np.asarray(amount, dtype=np.float64), secs.size)
    rates = amounts / secs / scale
    return {"name": name, "value": float(np.median(rates)), "unit": unit, "method": method,
            "median": float(np.median(rates)), "p90": float(np.percentile(rates, 10)), "min": float(rates.min()),
            "max": float(rates.max()), "repeats": int(secs.size)}


def time_metric(name: str, timing: Timing, method: str) -> dict:
    s = timing.summary()
    return {"name": name, "value": s["median"] * 1e3, "unit": "ms", "method": method,
            **{k: (v * 1e3 if k != "repeats" else v) for k, v in s.items()}}
