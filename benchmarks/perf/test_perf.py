"""Hot kernels and simulators on the smoke workload, timed by pytest-benchmark.

  pytest benchmarks/perf --benchmark-only --benchmark-autosave            save a run under .benchmarks/
  pytest benchmarks/perf --benchmark-only --benchmark-compare --benchmark-compare-fail=median:25%
Each benchmark also asserts its kernel's result, so a fast wrong kernel fails.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from benchmarks.compose import compose_config, compose_workload
from embedding.backends import build_backend, init_weights
from embedding.cache.workload import simulate_batches
from embedding.generate import generate_batches
from embedding.nmp.run import run_nmp
from sharding import BASELINES, CostModel, PlanWorkload, load_topology, optimize
from sharding.tablesets import load_tables


@pytest.fixture(scope="module")
def smoke():
    spec = compose_workload(["workload=smoke"])
    return spec, generate_batches(spec)


def test_generator_fill(benchmark, smoke):
    spec, _ = smoke
    batches = benchmark(generate_batches, spec)
    assert sum(b.num_lookups for b in batches) > spec.batch_size * spec.num_batches * spec.num_tables


@pytest.mark.parametrize("name", ["torch", "fbgemm"])
def test_backend_forward(benchmark, smoke, name):
    spec, batches = smoke
    backend = build_backend(name, spec, init_weights(spec), torch.device("cpu"), "fp32", 0.01)
    inputs = backend.prepare(batches[0])
    with torch.no_grad():
        out = benchmark(backend.forward, inputs)
    assert out.shape == (spec.batch_size, sum(t.dim for t in spec.tables))


def test_cache_lru_simulate(benchmark, smoke):
    spec, batches = smoke
    rep = benchmark(simulate_batches, batches, spec.tables, "lru", capacity_fraction=0.2)
    assert rep.overall.hits + rep.overall.misses == sum(b.num_lookups for b in batches)


def test_nmp_emulate(benchmark, smoke):
    spec, batches = smoke
    cfg = compose_config(["workload=smoke", "nmp=recnmp_base"]).nmp
    metrics = benchmark.pedantic(run_nmp, args=(cfg, spec, batches[:2]), rounds=3, iterations=1)
    latency = {m["name"]: m["value"] for m in metrics}
    assert latency["host.batch_latency"] > 0 and latency["recnmp.batch_latency"] > 0


@pytest.mark.parametrize("optimizer", ["greedy_size_lookups", "ours"])
def test_sharding_optimize(benchmark, optimizer):
    wl = PlanWorkload(load_tables("criteo_kaggle"), 512, "train")
    topo = load_topology("dgx_h100", 8)
    plan_fn = (lambda: optimize(wl, topo)) if optimizer == "ours" else (
        lambda: BASELINES[optimizer](wl, topo))
    plan = benchmark.pedantic(plan_fn, rounds=3, iterations=1)
    assert set(plan.tables) == {t.name for t in wl.tables}
    assert np.isfinite(CostModel(wl, topo).plan_cost(plan))


def test_generator_fill_scales(benchmark, smoke):
    """Generation of one large batch: the numba path, not Python overhead."""
    spec, _ = smoke
    big = replace(spec, batch_size=8192, num_batches=1)
    batches = benchmark(generate_batches, big)
    assert batches[0].batch_size == 8192
