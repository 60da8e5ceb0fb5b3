"""Local runner: one process, each configured backend in turn over the same batches and weights.

Per backend: build it, prepare every batch's input (untimed), warm up, then time `repeats` calls cycling over the
batches. Inference calls `forward` under `torch.no_grad`; training calls `train_step` (forward, backward of a
fixed random output gradient, optimizer update). Rates are computed per call (that call's bytes / its seconds) and
summarised by median and spread, with the machine's load over the timed calls. The harness-overhead check runs on
the first backend right after its timing (same backend, same warm state, same threads), sized to a share of the
run's measured calls.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from embedding.backends import BACKENDS, LookupBackend, build_backend
from embedding.backends.hybrid import HybridBackend, host_table_ids
from embedding.batch import Batch
from embedding.dlrm import DLRM
from embedding.spec import WorkloadSpec
from embedding.traffic import FORMULA, batch_traffic

from .config import BackendConfig, BenchConfig, PlacementConfig
from .records import metric
from .timing import Timing, rate_metric, time_calls, time_metric

__all__ = ["BackendResult", "run_backend", "run_model", "harness_overhead"]


@dataclass
class BackendResult:
    backend: str
    kernel: str
    optimizer: str
    metrics: list[dict]
    load: dict | None = None
    """the machine's load over the timed calls (benchmarks.trust.LoadProbe)"""
    overhead: list[dict] = field(default_factory=list)
    """harness-overhead metrics, when this backend was asked for them (overhead_calls not None)"""
    overhead_s: float = 0.0
    """wall time the harness-overhead check took"""


def make_backend(name: str, spec: WorkloadSpec, weights, placement: PlacementConfig,
                 cfg: BackendConfig) -> LookupBackend:
    device = torch.device(placement.device)
    if placement.host_largest or placement.host_tables:
        ids = host_table_ids(spec, list(placement.host_tables), placement.host_largest)
        return HybridBackend(BACKENDS[name], spec, weights, ids, device, cfg.precision, cfg.learning_rate)
    return build_backend(name, spec, weights, device, cfg.precision, cfg.learning_rate)


def _step_fn(backend: LookupBackend, inputs: list, train: bool, batch_size: int):
    """The call the harness times: a training step, or a bare forward (the caller holds torch.no_grad once)."""
    if train:
        g = torch.Generator().manual_seed(1)
        grad = torch.randn(batch_size, sum(backend.dims), generator=g).to(backend.device)
        return lambda i: backend.train_step(inputs[i], grad)
    return lambda i: backend.forward(inputs[i])


def run_backend(name: str, spec: WorkloadSpec, batches: list[Batch], weights, placement: PlacementConfig,
                cfg: BackendConfig, bench: BenchConfig, overhead_calls: int | None = None) -> BackendResult:
    """Time one backend; with overhead_calls (not None) also measure the harness's cost on it, making at most that
    many extra backend calls."""
    backend = make_backend(name, spec, weights, placement, cfg)
    inputs = [backend.prepare(b) for b in batches]
    train = spec.mode == "train"
    fn = _step_fn(backend, inputs, train, spec.batch_size)
    overhead, overhead_s = [], 0.0
    with torch.set_grad_enabled(train):
        timing = time_calls(fn, len(inputs), bench.warmup, bench.repeats, backend.device)
        if overhead_calls is not None:
            t0 = time.perf_counter()
            overhead = harness_overhead(fn, len(inputs), backend.device, timing, overhead_calls, name)
            overhead_s = time.perf_counter() - t0
    index_bytes = 4 if cfg.precision in ("fp16", "int8") and name == "fbgemm" else 8
    traffic = [batch_traffic(spec, b.lengths, cfg.precision, index_bytes) for b in batches]
    what = "training step (forward, backward, optimizer)" if train else "forward (torch.no_grad)"
    how = f"{what} per batch, {bench.repeats} timed calls after {bench.warmup} warm-up, {timing.clock}"
    metrics = [
        time_metric("batch_time", timing, how),
        rate_metric("samples_per_s", spec.batch_size, timing, "samples/s", how),
        rate_metric("lookups_per_s", np.array([t.lookups for t in traffic]), timing, "lookups/s", how),
        rate_metric("effective_bw", np.array([t.total for t in traffic]), timing, "GB/s",
                    f"{how}; {FORMULA}", 1e9),
        rate_metric("rows_bw", np.array([t.rows_read * t.train_factor for t in traffic]), timing, "GB/s",
                    f"{how}; rows read only, Σ_t L_t·D_t·w (×3 when training)", 1e9),
    ]
    if isinstance(backend, HybridBackend):
        metrics.append(metric("transfer_bytes", backend.transfer_bytes(spec.batch_size), "B/batch",
                              "pooled host outputs copied to the device per batch: B × Σ host dims × 4"))
    return BackendResult(name, backend.kernel, backend.optimizer, metrics, timing.load, overhead, overhead_s)


def run_model(name: str, spec: WorkloadSpec, batches: list[Batch], weights, placement: PlacementConfig,
              cfg: BackendConfig, bench: BenchConfig) -> BackendResult:
    """Full DLRM step (bottom MLP, embeddings, dot interaction, top MLP): training step or inference."""
    backend = make_backend(name, spec, weights, placement, cfg)
    model = DLRM(spec, backend, cfg.learning_rate)
    inputs = [model.prepare(b) for b in batches]
    train = spec.mode == "train"
    fn = (lambda i: model.train_step(inputs[i])) if train else (lambda i: model.predict(inputs[i]))  # noqa: E731
    timing = time_calls(fn, len(inputs), bench.warmup, bench.repeats, backend.device)
    what = "DLRM training step (BCE loss, backward, SGD dense + table optimizer)" if train else "DLRM inference"
    how = f"{what} per batch, {bench.repeats} timed calls after {bench.warmup} warm-up, {timing.clock}"
    return BackendResult(name, f"DLRM + {backend.kernel}", backend.optimizer,
                         [time_metric("model_step_time", timing, how),
                          rate_metric("model_samples_per_s", spec.batch_size, timing, "samples/s", how)], timing.load)


def harness_overhead(fn, n_inputs: int, device: torch.device, measured: Timing, budget_calls: int,
                     name: str, noop_rounds: int = 11) -> list[dict]:
    """What the harness adds to each timed call, two ways, spending at most `budget_calls` extra backend calls.

    harness_overhead: the timing loop's own cost per call (wall time of time_calls over a no-op: no backend call,
    median of `noop_rounds` runs of as many calls as were measured) as a share of the backend's median timed call
    in this run, the same figure as the table's ms/batch.
    harness_overhead_ab: time_calls against a bare loop calling the same backend, alternated in rounds of equal
    calls within the budget, median ratio − 1: includes everything, but on a shared machine its spread is the
    machine's noise. Skipped (and said so) when the budget is under two calls.
    On a GPU both loops are synchronised before the clock starts and before it stops; the harness's CPU cost
    overlaps GPU work there, so the first figure is an upper bound.
    """
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    calls = int(measured.seconds.size)
    walls = []
    for _ in range(noop_rounds):
        t0 = time.perf_counter()
        time_calls(lambda i: None, n_inputs, 0, calls, device, probe_load=False)
        walls.append((time.perf_counter() - t0) / calls)
    per_call = float(np.median(walls))
    out = [metric("harness_overhead", 100 * per_call / measured.median, "%",
                  f"time_calls' own cost per call ({per_call * 1e6:.2f} µs: wall time of time_calls over a no-op, "
                  f"median of {noop_rounds} × {calls} calls) over {name}'s median timed call in this run "
                  f"({measured.median * 1e3:.3f} ms, the table's ms/batch)")]
    rounds = min(11, budget_calls // 2)
    if rounds < 1:
        out.append(metric("harness_overhead_ab_skipped", budget_calls, "calls",
                          "A/B against a bare loop not run: its budget (10% of this backend's measured calls) is "
                          "under two backend calls"))
        return out
    per_round = max(1, budget_calls // (2 * rounds))
    ratios, bare_calls = [], []
    for r in range(rounds):
        start = r * per_round
        sync()
        t0 = time.perf_counter()
        for k in range(start, start + per_round):
            fn(k % n_inputs)
        sync()
        bare = time.perf_counter() - t0
        t0 = time.perf_counter()
        time_calls(lambda i, s=start: fn((i + s) % n_inputs), n_inputs, 0, per_round, device, probe_load=False)
        harness = time.perf_counter() - t0
        ratios.append(harness / bare)
        bare_calls.append(bare / per_round)
    r = 100 * (np.array(ratios) - 1)
    out.append(metric("harness_overhead_ab", float(np.median(r)), "%",
                      f"wall time of time_calls over a bare loop calling {name} {per_round} time(s), median of "
                      f"{rounds} alternating rounds ({2 * rounds * per_round} backend calls; the bare calls' mean "
                      f"wall time {np.mean(bare_calls) * 1e3:.3f} ms includes what the per-call clock leaves out); "
                      "min/max show the machine's noise" + (f"; only {rounds} round(s) fit the budget: read it as noise, "
                                                            "not a figure (more bench.repeats buy more rounds)"
                                                            if rounds < 3 else ""),
                      min=float(r.min()), max=float(r.max()), repeats=rounds,
                      calls=2 * rounds * per_round))
    return out
