"""Validation of queue, dispatch and measurement: the fixed-service SUT under LoadGen's Poisson arrivals against
simulated M/D/c percentiles; and LoadGen's own cost per query with a null SUT.

The fixed service is a timed wait of a known length per query: it checks the plumbing (the queue, the worker pool,
LoadGen's clocks), not inference. Measured p50 and p99 pass when within `tolerance` of the M/D/c reference at the
nominal service time for a run of the same length (the median over simulated runs of `query_count` queries, each
from an empty queue, with the 5–95% band of single runs beside it); the steady-state M/D/c percentiles are
reported too (a 2,000-query run at 85% utilisation measures a p99 ≈ 10% below the steady state's). Beside it, the same queue simulated with the service times measured in the run (M/G/c):
where M/D/c misses but M/G/c fits, the error is the OS timer's (the wait overshooting), not the queue's.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import mlperf_loadgen as lg
import numpy as np

from .config import LoadGenConfig, ServerConfig
from .loadgen import log_settings, parse_summary, run_loadgen, test_settings
from .queries import QuerySet
from .server import Server
from .services import FixedService
from .theory import finite_run_percentiles, mdc_percentiles, simulate_mgc

__all__ = ["validate_point", "null_sut_overhead"]


def validate_point(service_ms: float, workers: int, utilisation: float, queries: QuerySet, base: LoadGenConfig,
                   query_count: int, log_dir: Path, tolerance: float = 0.10, customers: int = 2_000_000) -> dict:
    """One LoadGen Server run of the fixed-service SUT at utilisation ρ (λ = ρ·c/S) and its M/D/c reference."""
    lam = utilisation * workers / (service_ms / 1e3)
    cfg = replace(base, scenario="Server", target_qps=lam, latency_ms=max(1000.0, 50 * service_ms),
                  percentile=99.0, min_query_count=query_count, min_duration_ms=0)
    server = Server(ServerConfig(workers=workers, max_batch=0, split=0, service="fixed", fixed_ms=service_ms),
                    FixedService(service_ms))
    point = run_loadgen(server, queries, cfg, log_dir, target_qps=lam)
    steady = mdc_percentiles(lam, service_ms / 1e3, workers, customers=customers)
    ref = finite_run_percentiles(lam, service_ms / 1e3, workers, query_count)
    g = simulate_mgc(lam, np.asarray(server.stats.service_s), workers, customers=customers)
    ref_g = {f"p{p:g}_ms": 1e3 * float(np.percentile(g, p)) for p in (50, 99)}
    out = {"service_ms": service_ms, "workers": workers, "utilisation": utilisation, "qps": lam,
           "measured": point, "reference": ref, "reference_steady_state": steady,
           "reference_measured_service": ref_g}
    for p in ("p50_ms", "p99_ms"):
        err = point[p] / ref[p] - 1
        out[f"{p[:-3]}_error"] = err
        out[f"{p[:-3]}_ok"] = abs(err) <= tolerance
        out[f"{p[:-3]}_error_mgc"] = point[p] / ref_g[p] - 1
    return out


def null_sut_overhead(queries: QuerySet, base: LoadGenConfig, qps: float, query_count: int, log_dir: Path) -> dict:
    """LoadGen Server run whose SUT completes every query inside issue_queries: the latency LoadGen reports is its
    own cost plus one Python callback round trip."""
    log_dir.mkdir(parents=True, exist_ok=True)

    def issue(samples) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])

    sut = lg.ConstructSUT(issue, lambda: None)
    n = int(queries.sizes.size)
    qsl = lg.ConstructQSL(n, n, lambda _: None, lambda _: None)
    log = log_settings(log_dir)
    cfg = replace(base, scenario="Server", target_qps=qps, latency_ms=100.0, min_query_count=query_count,
                  min_duration_ms=0)
    try:
        lg.StartTestWithLogSettings(sut, qsl, test_settings(cfg, qps), log)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    summary = parse_summary((log_dir / "mlperf_log_summary.txt").read_text())
    summary.update(target_qps=qps, loadavg=list(os.getloadavg()), log_dir=str(log_dir), time=time.time())
    return summary
