"""The LoadGen adapter: a system under test for `mlperf_loadgen` around a `Server`, one test, its logs parsed.

LoadGen (mlcommons-loadgen, MLPerf's own traffic generator) issues queries (Poisson arrivals in the Server scenario,
one query after another in SingleStream, everything at once in Offline); each LoadGen sample index names one of the
`QuerySet`'s queries (a set of samples, as MLPerf DLRM aggregates user–item pairs). Its `mlperf_log_summary.txt`
and `mlperf_log_detail.txt` stay in the run's log folder; the record takes the verdict and percentiles from them.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import mlperf_loadgen as lg

from .config import LoadGenConfig
from .queries import QuerySet
from .server import Request, Server

__all__ = ["run_loadgen", "parse_summary", "test_settings", "log_settings"]

_SCENARIO = {"Server": lg.TestScenario.Server, "Offline": lg.TestScenario.Offline,
             "SingleStream": lg.TestScenario.SingleStream}


def test_settings(cfg: LoadGenConfig, target_qps: float | None = None) -> lg.TestSettings:
    s = lg.TestSettings()
    s.scenario = _SCENARIO[cfg.scenario]
    s.mode = lg.TestMode.PerformanceOnly
    qps = cfg.target_qps if target_qps is None else target_qps
    bound_ns = int(cfg.latency_ms * 1e6)
    s.server_target_qps = qps
    s.server_target_latency_ns = bound_ns
    s.server_target_latency_percentile = cfg.percentile / 100
    s.offline_expected_qps = qps
    s.single_stream_expected_latency_ns = bound_ns
    s.single_stream_target_latency_percentile = cfg.percentile / 100
    s.min_duration_ms = cfg.min_duration_ms
    s.min_query_count = cfg.min_query_count
    if cfg.max_duration_ms:
        s.max_duration_ms = cfg.max_duration_ms
    s.qsl_rng_seed = s.sample_index_rng_seed = s.schedule_rng_seed = cfg.seed
    return s


_NUM = r"([-+0-9.eE]+|nan|inf)"


def parse_summary(text: str) -> dict:
    """Verdict, throughput and latency percentiles (ms) from LoadGen's mlperf_log_summary.txt."""
    out: dict = {}
    m = re.search(r"Result is\s*:\s*(\w+)", text)
    out["verdict"] = m.group(1) if m else "UNKNOWN"
    for key, pat in (("scheduled_qps", r"Scheduled samples per second\s*:\s*" + _NUM),
                     ("completed_qps", r"Completed samples per second\s*:\s*" + _NUM),
                     ("samples_per_second", r"Samples per second\s*:\s*" + _NUM),
                     ("qps_with_overhead", r"QPS w/ loadgen overhead\s*:\s*" + _NUM),
                     ("min_latency_ms", r"Min latency \(ns\)\s*:\s*" + _NUM),
                     ("mean_latency_ms", r"Mean latency \(ns\)\s*:\s*" + _NUM),
                     ("max_latency_ms", r"Max latency \(ns\)\s*:\s*" + _NUM)):
        m = re.search(pat, text)
        if m:
            v = float(m.group(1))
            out[key] = v / 1e6 if key.endswith("_ms") else v
    for m in re.finditer(r"([0-9.]+) percentile latency \(ns\)\s*:\s*" + _NUM, text):
        out[f"p{float(m.group(1)):g}_ms"] = float(m.group(2)) / 1e6
    if "completed_qps" not in out:  # Offline reports samples/s, SingleStream QPS with LoadGen's overhead
        for key in ("samples_per_second", "qps_with_overhead"):
            if key in out:
                out["completed_qps"] = out[key]
                break
    out["early_stopping_ok"] = "Early stopping satisfied: Yes" in text or "Early Stopping Result" not in text
    return out


def log_settings(log_dir: str | Path) -> lg.LogSettings:
    """LoadGen's summary and detail logs into `log_dir`, nothing on stdout, no trace."""
    out = lg.LogOutputSettings()
    out.outdir = str(log_dir)
    out.copy_summary_to_stdout = False
    log = lg.LogSettings()
    log.log_output = out
    log.enable_trace = False
    return log


def run_loadgen(server: Server, queries: QuerySet, cfg: LoadGenConfig, log_dir: str | Path,
                target_qps: float | None = None) -> dict:
    """One LoadGen test of `server` (started here, stopped at the end); returns the parsed summary plus the
    server's batching statistics, with LoadGen's own logs left in `log_dir`."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    sizes = queries.sizes

    def issue(samples) -> None:
        now = time.perf_counter_ns()
        server.submit([Request(s.id, int(s.index), int(sizes[s.index]), now) for s in samples])

    def complete(r: Request) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(r.response_id, 0, 0)])

    server.complete = complete
    server.start()
    sut = lg.ConstructSUT(issue, server.flush)
    n = int(sizes.size)
    qsl = lg.ConstructQSL(n, n, lambda _: None, lambda _: None)
    log = log_settings(log_dir)
    t0 = time.perf_counter()
    try:
        lg.StartTestWithLogSettings(sut, qsl, test_settings(cfg, target_qps), log)
    finally:
        server.stop()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    wall = time.perf_counter() - t0
    summary = parse_summary((log_dir / "mlperf_log_summary.txt").read_text())
    summary.update(server.stats.summary())
    inside = [t for svc in server.services for t in getattr(svc, "inside_s", [])]
    if inside:  # process workers: the share of the service time spent inside the worker process (the rest: pipe,
        summary["process_inside_ms_mean"] = 1e3 * sum(inside) / len(inside)  # wake-ups)
    summary.update(wall_s=wall, log_dir=str(log_dir), loadavg=list(os.getloadavg()),
                   target_qps=cfg.target_qps if target_qps is None else target_qps)
    return summary
