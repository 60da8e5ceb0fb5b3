"""Local runner: one process, each configured backend in turn over the same batches and weights.

Per backend: build it, prepare every batch's input (untimed), warm up, then time `repeats` calls cycling over the
batches. Inference calls `forward` under `torch.no_grad`; training calls `train_step` (forward, backward of a
fixed random output gradient, optimizer update). Rates are computed per call (that call's bytes / its seconds) and
summarised by median and spread.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

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
from .timing import rate_metric, time_calls, time_metric

__all__ = ["BackendResult", "run_backend", "run_model", "harness_overhead"]


@dataclass
class BackendResult:
    backend: str
    kernel: str
    optimizer: str
    metrics: list[dict]


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
                cfg: BackendConfig, bench: BenchConfig) -> BackendResult:
    backend = make_backend(name, spec, weights, placement, cfg)
    inputs = [backend.prepare(b) for b in batches]
    train = spec.mode == "train"
    with torch.set_grad_enabled(train):
        timing = time_calls(_step_fn(backend, inputs, train, spec.batch_size), len(inputs), bench.warmup,
                            bench.repeats, backend.device)
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
    return BackendResult(name, backend.kernel, backend.optimizer, metrics)


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
                          rate_metric("model_samples_per_s", spec.batch_size, timing, "samples/s", how)])


def harness_overhead(backend: LookupBackend, inputs: list, train: bool, batch_size: int, calls: int,
                     rounds: int = 11) -> list[dict]:
    """What the harness adds to each timed call, two ways.

    harness_overhead: the timing loop's own cost per call (time_calls over a no-op, median of `rounds` runs of
    `calls` calls) as a share of the backend's median call: deterministic up to clock noise.
    harness_overhead_ab: wall time of time_calls against a bare loop calling the backend directly, alternated
    `rounds` times, median ratio − 1: includes everything, but on a shared machine its spread is machine noise.
    On a GPU both loops are synchronised before the clock starts and before it stops (wall time of the whole work,
    not of the launches); the harness's CPU cost overlaps GPU work there, so the first figure is an upper bound.
    """
    sync = (lambda: torch.cuda.synchronize(backend.device)) if backend.device.type == "cuda" else (lambda: None)
    fn = _step_fn(backend, inputs, train, batch_size)
    n = len(inputs)
    grad = torch.randn(batch_size, sum(backend.dims)).to(backend.device) if train else None
    ratios, kernel = [], []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        if train:
            for k in range(calls):
                backend.train_step(inputs[k % n], grad)
        else:
            with torch.no_grad():
                for k in range(calls):
                    backend.forward(inputs[k % n])
        sync()
        bare = time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.set_grad_enabled(train):
            time_calls(fn, n, 0, calls, backend.device)
        harness = time.perf_counter() - t0
        ratios.append(harness / bare)
        kernel.append(bare / calls)
    walls = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        time_calls(lambda i: None, n, 0, calls, backend.device)
        walls.append((time.perf_counter() - t0) / calls)
    per_call = float(np.median(walls))
    share = 100 * per_call / float(np.median(kernel))
    r = 100 * (np.array(ratios) - 1)
    return [
        metric("harness_overhead", share, "%",
               f"time_calls' own cost per call ({per_call * 1e6:.2f} µs: wall time of time_calls over a no-op, median of {rounds} × "
               f"{calls} calls) over the median bare call of {backend.name} ({np.median(kernel) * 1e3:.3f} ms)"),
        metric("harness_overhead_ab", float(np.median(r)), "%",
               f"wall time of time_calls over a bare loop calling {backend.name} {calls} times, median of {rounds} "
               "alternating rounds; min/max show the machine's noise", min=float(r.min()), max=float(r.max()),
               repeats=rounds),
    ]
