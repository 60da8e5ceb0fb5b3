"""Queueing references for validating the server: M/D/1 and M/D/c by simulation, M/D/1's mean in closed form.

Percentiles of the M/D/c sojourn time have no simple closed form, so they are simulated: Poisson arrivals, a
deterministic service time S, c servers taking customers first come first served; each customer starts at
max(arrival, earliest free time) on the server that frees first (c ≤ a few: a linear scan of c free times; c = 1
is Lindley's recursion). Millions of customers, compiled with numba, one thread. `simulate_mgc` is the same queue
with service times drawn from measured ones: it separates the queue's and the measurement's error from the timer's.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["md1_mean_sojourn", "simulate_mdc", "simulate_mgc", "mdc_percentiles", "finite_run_percentiles"]


def md1_mean_sojourn(lam: float, service: float) -> float:
    """M/D/1 mean time in system: S + ρS / (2(1 − ρ)), ρ = λS < 1 (Pollaczek–Khinchine)."""
    rho = lam * service
    if not 0 <= rho < 1:
        raise ValueError(f"M/D/1 needs utilisation in [0, 1), got {rho}")
    return service + rho * service / (2 * (1 - rho))


@numba.njit(cache=True)
def _sojourn(gaps: np.ndarray, service: np.ndarray, c: int) -> np.ndarray:
    """FCFS c-server sojourn times; service[i] is customer i's service time (an array of one entry: all equal)."""
    free = np.zeros(c)
    out = np.empty(gaps.size)
    t = 0.0
    one = service.size == 1
    for i in range(gaps.size):
        t += gaps[i]
        k = 0
        for j in range(1, c):
            if free[j] < free[k]:
                k = j
        start = max(t, free[k])
        free[k] = start + (service[0] if one else service[i])
        out[i] = free[k] - t
    return out


def simulate_mdc(lam: float, service: float, c: int, customers: int = 2_000_000, seed: int = 0,
                 warmup: int = 10_000) -> np.ndarray:
    """Sojourn times (seconds) of `customers` M/D/c customers after `warmup` dropped ones."""
    if not 0 < lam * service / c < 1:
        raise ValueError(f"M/D/{c} needs utilisation in (0, 1), got {lam * service / c}")
    gaps = np.random.default_rng(seed).exponential(1 / lam, size=customers + warmup)
    return _sojourn(gaps, np.array([float(service)]), int(c))[warmup:]


def simulate_mgc(lam: float, services: np.ndarray, c: int, customers: int = 2_000_000, seed: int = 0,
                 warmup: int = 10_000) -> np.ndarray:
    """M/G/c sojourn times with service times drawn (with replacement) from measured `services` (seconds)."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / lam, size=customers + warmup)
    draws = rng.choice(np.asarray(services, dtype=float), size=customers + warmup)
    return _sojourn(gaps, draws, int(c))[warmup:]


def mdc_percentiles(lam: float, service: float, c: int, percentiles=(50, 90, 95, 99, 99.9),
                    customers: int = 2_000_000, seed: int = 0) -> dict[str, float]:
    """{'p50_ms': ..., ...} of the simulated M/D/c sojourn time, in ms."""
    s = simulate_mdc(lam, service, c, customers, seed)
    return {f"p{p:g}_ms": 1e3 * float(np.percentile(s, p)) for p in percentiles} | {"mean_ms": 1e3 * float(s.mean())}


def finite_run_percentiles(lam: float, service: float, c: int, customers: int, runs: int = 300, seed: int = 1,
                           percentiles=(50, 99)) -> dict[str, float]:
    """What one measured run of `customers` queries should show: M/D/c runs of that length, each starting from an
    empty queue as a LoadGen run does, simulated `runs` times; per percentile the median over runs ('p99_ms') and
    the 5th–95th percentile band ('p99_band_ms'). At high utilisation a short run's p99 sits below the steady
    state's (the queue has not yet built its long tail) and varies widely from run to run."""
    if not 0 < lam * service / c < 1:
        raise ValueError(f"M/D/{c} needs utilisation in (0, 1), got {lam * service / c}")
    rng = np.random.default_rng(seed)
    per_run = np.array([np.percentile(_sojourn(rng.exponential(1 / lam, size=customers), np.array([float(service)]),
                                               int(c)), percentiles) for _ in range(runs)])  # (runs, percentiles)
    out = {}
    for j, p in enumerate(percentiles):
        lo, mid, hi = np.percentile(per_run[:, j], (5, 50, 95))
        out[f"p{p:g}_ms"], out[f"p{p:g}_band_ms"] = 1e3 * float(mid), (1e3 * float(lo), 1e3 * float(hi))
    return out
