"""Timing: warm-up kept out, repeats, median and spread (p25/p75, IQR / median); CUDA events on the GPU; the
machine's load over the timed calls (benchmarks.trust.LoadProbe)."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .trust import LoadProbe

__all__ = ["Timing", "time_calls"]


@dataclass(frozen=True)
class Timing:
    seconds: np.ndarray  # one entry per timed call
    clock: str
    load: dict | None = None
    """the machine's load over the timed calls (LoadProbe.result); None where not probed"""

    @property
    def median(self) -> float:
        return float(np.median(self.seconds))

    @property
    def p90(self) -> float:
        return float(np.percentile(self.seconds, 90))

    def summary(self) -> dict:
        s = self.seconds
        return {"median": self.median, "p90": self.p90, "min": float(s.min()), "max": float(s.max()),
                **_quartiles(s), "repeats": int(s.size)}


def _quartiles(values: np.ndarray) -> dict:
    """p25, p75 and the relative spread rel_iqr = (p75 − p25) / median (0 for a single value)."""
    p25, med, p75 = (float(x) for x in np.percentile(values, [25, 50, 75]))
    return {"p25": p25, "p75": p75, "rel_iqr": (p75 - p25) / med if med else 0.0}


def time_calls(fn: Callable[[int], object], n_inputs: int, warmup: int, repeats: int,
               device: torch.device, probe_load: bool = True) -> Timing:
    """Call fn(i) for i cycling over n_inputs: `warmup` calls untimed, then `repeats` timed calls, each timed on its
    own (perf_counter on CPU; CUDA events on the GPU, synchronised once at the end). With probe_load, the
    machine's load over the timed calls comes with it (a few µs: two getloadavg and /proc/stat reads)."""
    for k in range(warmup):
        fn(k % n_inputs)
    probe = LoadProbe(torch.get_num_threads())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(repeats)]
        with probe:
            for k, (start, end) in enumerate(events):
                start.record()
                fn(k % n_inputs)
                end.record()
            torch.cuda.synchronize(device)
        secs = np.array([s.elapsed_time(e) / 1e3 for s, e in events])
        return Timing(secs, "cuda events", probe.result if probe_load else None)
    secs = np.empty(repeats)
    clock = time.perf_counter
    with probe:
        for k in range(repeats):
            t0 = clock()
            fn(k % n_inputs)
            secs[k] = clock() - t0
    return Timing(secs, "time.perf_counter", probe.result if probe_load else None)


def rate_metric(name: str, amount: float | np.ndarray, timing: Timing, unit: str, method: str,
                scale: float = 1.0) -> dict:
    """Rate = amount / seconds of each timed call (amount may vary per call: an array cycling like the inputs);
    value is the median rate, p90 the rate that 90% of calls reached (10th percentile), min and max the extremes,
    p25/p75 the quartiles of the rates and rel_iqr their spread over the median."""
    secs = timing.seconds
    amounts = np.resize(np.asarray(amount, dtype=np.float64), secs.size)
    rates = amounts / secs / scale
    return {"name": name, "value": float(np.median(rates)), "unit": unit, "method": method,
            "median": float(np.median(rates)), "p90": float(np.percentile(rates, 10)), "min": float(rates.min()),
            "max": float(rates.max()), **_quartiles(rates), "repeats": int(secs.size)}


def time_metric(name: str, timing: Timing, method: str) -> dict:
    s = timing.summary()
    return {"name": name, "value": s["median"] * 1e3, "unit": "ms", "method": method,
            **{k: (v if k in ("repeats", "rel_iqr") else v * 1e3) for k, v in s.items()}}
