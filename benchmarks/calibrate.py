"""`dlrmbench calibrate [--out FILE] [--world-size N] [--rows N] [--rounds N] [--repeats N] [--refit FILE]`: fit
the cost model's constants on this machine and write a hardware YAML that `sharding.topology.load_topology` reads,
with provenance and date.

Runs as a job of N local ranks (gloo/CPU), every rank measuring at once as ranks of a real job do:
  machine            CPU model, cores, last-level cache (LLC), memory, load average and a 1-second copy-bandwidth
                     probe (`benchmarks.perfmodel.machine`), stored so a later user can be warned when the file
                     is used on another machine (`check_hardware_file`); and the speed reference
                     (`benchmarks.perfmodel.reference`), every rank at once, at the start and the end
                     (`machine.reference`): what `validate-cost` compares each round's with.
  lookup bandwidth   FBGEMM TBE forward (what DMP's fused kernel runs) on one table per row size (dims 16/128)
                     × table size (0.25 and 8 × the LLC) × locality (uniform, Zipf 1.05) × B 512/2048, 16 ids
                     per bag; bytes as the cost model counts them: ids·dim·4 + ids·8 + bags·dim·4. Tier bandwidth
                     = 1 / slope of the least-squares line time = c + bytes/bw, and `lookup_model` (relative
                     non-negative least squares): time = c + ids·id_s + bytes/bw_near + DRAM row bytes/bw_dram,
                     a row missing the LLC as a hot set of the LLC's size would leave it. Its per-id cost, in
                     bytes (id_s·bw_near), is `Topology.lookup_weights`: the cost model adds it per id looked up.
  co-located ranks   the largest DRAM-bound point timed by rank 0 alone / with every rank busy (shared bandwidth).
  backward           the same TBE trained with EXACT_ROWWISE_ADAGRAD: multiplier = slope of (train − fwd) time
                     over bytes / slope of fwd time (the per-byte cost of backward + fused update vs forward);
                     `lookup_model.backward` fits its rows once per distinct row the batch touches (the fused
                     update reads and writes each once), and the model prices the backward so
                     (`lookup_weights.lookup_bwd.unique_rows`: hot Zipf tables update far fewer rows than they
                     look up, while the stage plans below, uniform, touch about one row per id), plus a cost per
                     distinct row whatever its width (`lookup_bwd.row_bytes`, ROW_NOTE).
  dense optimizer    TorchRec RowWiseAdagrad step on dense fp32 tables of 3 sizes: bandwidth = 1 / slope of
                     time = c + parameter bytes / bw, relative least squares (the step of data-parallel tables).
  collectives        gloo all_to_all_single, reduce_scatter_tensor, all_gather_into_tensor and all_reduce of
                     4 KiB, 64 KiB, 1 MiB, 4 MiB per rank: per op, relative least squares of time = latency + bytes
                     a rank sends / bw
                     (sent: (W−1)/W·n for all-to-all, reduce-scatter (n = input) and all-gather (n = output),
                     2·(W−1)/W·n for all-reduce) -> `Topology.collectives`.
  stage overheads    TorchRec's own stages (benchmarks.distributed.stages) on tiny tables (1000 rows, dim 16,
                     B 16, one id per bag: bytes ≈ 0), one plan per sharding type (2·W tables each) and one with
                     2·W table-wise + 2·W row-wise tables: base = TW + RW − mixed (per step, whatever the groups),
                     type X = X − base, per stage, clamped at 0 -> `Topology.stage_overhead`.
  stage bandwidths   the same stages on a larger plan per type (2·W tables of `BIG`, both ranks busy): per stage,
                     the cost model's bytes of that plan (`CostModel.stage_seconds` at bandwidth 1, per-id bytes
                     included) / (its time −
                     the tiny plan's) -> `Topology.stage_bandwidth`. TorchRec's stages get far less per byte than
                     bare gloo calls or a lone TBE (KJT permutes and bucketizing, both ranks' kernels at once).
                     Tiny and larger plans of a round run back to back; medians over steps.
  step overhead      per tiny plan and rank, its uninstrumented step median − the sum of its own stage medians,
                     mean over ranks: what a step spends outside the embedding stages (loss, the dense part's
                     backward, zero_grad, the framework between stages); median over the tiny plans ->
                     `Topology.step_overhead`. What the larger plans' (median) gap adds over the tiny plans', per
                     pooled value a rank's batch yields (batch × Σ dims: 131,072 vs 1,024–2,048 at W = 2; the
                     loss and dense gradients run over them) -> `not_priced.step_overhead_per_value`
                     (measured, not priced: `sharding.cost.CostModel.outside` says why).
  stacked            the larger TW plan with every table on rank 0 ("TW:stack"): the lone rank's lookup and
                     backward speed-up and the KJT all-to-all against the model's price (`stacked`), in the
                     first round only (STACK_NOTE); printed and
                     stored, not priced.
Rounds: everything above runs in `--rounds` interleaved rounds (each runs every microbenchmark once, `--repeats`
timed calls per point and `--steps` timed steps per stage plan, in an order rotated by one per round); every term is fitted on each round alone and the
figure written is its median over rounds, with its min–max over rounds printed beside it and the per-round
measurements and fits stored (`calibration.rounds`, `round_fits`, `term_spread`): a burst of load from another
process moves one round's fit, not the figure (before rounds, when each figure was fitted once on medians, two
calibrations taken back to back gave a TW plan's fixed cost 3.8 and 5.6 ms).
`--refit FILE` fits a calibrated file's stored measurements again with this code (nothing is measured; a file
written before rounds refits as one round, as it was fitted).
All timings are medians, as the validation reports; every fit's median and max relative residual (medians over
rounds) is printed and stored (`fit_residuals`), with each phase's seconds summed over rounds (the stage plans are
most of the time).
None of these is one of the plans `benchmarks.validate_cost` validates.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.calibration_rounds import median_tree, rotated, spread_tree
from benchmarks.errors import OneLineParser, check_output_file, one_line
from embedding.files import umask_mode

__all__ = ["main", "refit", "lookup_weights", "fit_relative", "stage_plan_bytes", "fit_bandwidth", "fit_latency_bandwidth", "stage_overheads", "stage_bandwidths", "step_overhead",
           "step_overhead_per_value", "pooled_values", "stacked",
           "OVERHEAD_PLANS"]

DIMS = (16, 128)
LLC_MULTIPLES = (0.25, 8.0)  # table bytes / last-level cache: one table that fits, one far beyond
ACCESS = ("uniform", "zipf")
BATCHES = (512, 2048)
COLLECTIVE_KIB = (4, 64, 1024, 4096)
DENSE_ROWS = (4000, 32000, 256000)
OVERHEAD_PLANS = ("TW", "RW", "CW", "TWRW", "DP", "TW+RW")
# 3 rounds × 8 timed calls per microbenchmark point (was 1 pass × 20, then 5 rounds): alternated with 5 rounds
# at load 5-7 on the 2-core VM, 3 rounds took 167/204 s against 235/283 s and priced the same 24 measured
# steps 28%/18% off against 32%/37% (results/validation/calibrate_time_20261203.md); a median over 3 still
# outvotes one disturbed round
ROUNDS, REPEATS = 3, 8
# timed steps of each TorchRec stage plan per round, and warm-up steps before the plain and again before the staged
# ones: 12 and 1 since 2026-12-03 (26 steps a plan; was validate-cost's 20 and 3, 46 steps, 71 of calibrate's
# 122 s; the staged steps follow the plain ones of the same plan, already warm); the median over 3 rounds of a
# 12-step median; A/B in results/validation/calibrate_time_i19a_20261203.md (with 8 steps at load 2–3, a TW plan's
# stages once summed 1.5–2.5× what 20 steps gave 20 minutes earlier at load 1–2; load and steps not separated)
STAGE_STEPS = 12
STAGE_WARMUP = 1
STAGE_KEYS = ("input_dist", "lookup", "output_dist", "output_dist_bwd", "lookup_bwd", "optimizer")


def fit_bandwidth(nbytes: np.ndarray, secs: np.ndarray) -> float:
    """Least squares of secs = bytes / bw through the origin: bw = Σb² / Σ(b·t)."""
    return float(np.sum(nbytes**2) / np.sum(nbytes * secs))


def fit_latency_bandwidth(nbytes: np.ndarray, secs: np.ndarray) -> tuple[float, float]:
    """Least squares of secs = latency + bytes / bw; (latency s ≥ 0, bandwidth bytes/s)."""
    slope, intercept = np.polyfit(nbytes, secs, 1)
    return max(float(intercept), 0.0), float(1.0 / max(slope, 1e-15))


def _median_time(fn, repeats: int, warmup: int = 2) -> float:
    """Median of the call's time: the statistic `benchmarks.validate_cost` reports, so that what is fitted and
    what is validated are the same kind of number."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def lookup_rows(dim: int, llc_multiple: float, llc: int, cap: int | None) -> int:
    """Rows of a table of `llc_multiple` × the last-level cache at `dim` fp32 columns (capped by `cap`)."""
    rows = max(1000, int(llc_multiple * llc / (dim * 4)))
    return min(rows, cap) if cap else rows


def lookup_terms(p: dict[str, Any], llc: int, unique: bool = False) -> tuple[float, float, float]:
    """(ids, bytes near the core, extra row bytes from DRAM) of one lookup point: every byte the kernel reads or
    writes (ids·8 + rows gathered + pooled output) counts near the core (`unique`: the rows as the backward's
    fused update touches them, once per distinct row, `unique_rows`); a gathered row of a table of
    `table_bytes` misses the last-level cache with the probability a static hot set of the cache's size leaves
    (`zipf_miss_rate`; uniform: 1 − llc / table bytes), and its bytes count again in the DRAM term."""
    from sharding.cost import zipf_miss_rate

    frac = min(1.0, llc / p["table_bytes"])
    miss = zipf_miss_rate(p["rows"], 1.05, frac) if p["access"] == "zipf" else 1.0 - frac
    gather = (p["unique_rows"] if unique else p["ids"]) * p["dim"] * 4
    return p["ids"], p["ids"] * 8 + p["batch"] * p["dim"] * 4 + gather, gather * miss


def per_unique_row(points: list[dict[str, Any]]) -> bool:
    """Whether the grid's points hold their distinct rows (files calibrated before they were stored do not):
    then the backward is fitted, and priced, per distinct row (`lookup_weights`)."""
    return bool(points) and all("unique_rows" in p for p in points)


def fit_lookup(points: list[dict[str, Any]], llc: int, y: str = "fwd_s", unique: bool = False) -> dict[str, float]:
    """Non-negative least squares of the relative error of time = c + ids·id_s + near bytes / near_bandwidth
    + DRAM bytes / dram_bandwidth over the grid (`lookup_terms`, `unique`: rows counted once per distinct row);
    with the fit's median and max absolute relative residual."""
    from scipy.optimize import nnls

    terms = np.array([lookup_terms(p, llc, unique) for p in points])
    a = np.column_stack([np.ones(len(points)), terms])
    if unique:  # + a cost per distinct row, whatever its width (ROW_NOTE)
        a = np.column_stack([a, [float(p["unique_rows"]) for p in points]])
    t = np.array([p[y] for p in points])
    w = 1.0 / np.maximum(t, 1e-9)  # relative error: a small point's residual counts as much as a large one's
    coef, _ = nnls(a * w[:, None], t * w)
    pred = a @ coef
    res = np.abs(pred - t) / np.maximum(t, 1e-12)
    out = {"call_s": float(coef[0]), "id_s": float(coef[1]), "near_bandwidth": float(1 / max(coef[2], 1e-15)),
           "dram_bandwidth": float(1 / max(coef[3], 1e-15)), "median_residual": float(np.median(res)),
           "max_residual": float(res.max())}
    if unique:
        out["row_s"] = float(coef[4])
    return out


ROW_NOTE = ("row_bytes: the backward's fused row-wise update costs about the same per distinct row at dim 16 and 128 "
            "(0.5-1 µs per row on the 2-core VM, 2026-12-02): a cost per distinct row, not per byte. Without it the "
            "grid's fit put that cost on the ids (185 ns per id), so hot Zipf and small tables, with far fewer "
            "distinct rows than ids, were priced as if every id updated a row (results/validation/"
            "costmodel_rounds_20261201.md, section 13)")


def residual(points: list[dict], x: str, y: str, fit: tuple[float, float]) -> tuple[float, float]:
    """(median, max) |relative residual| of a latency + bytes/bandwidth fit."""
    lat, bw = fit
    res = [abs(lat + p[x] / bw - p[y]) / max(p[y], 1e-12) for p in points]
    return float(np.median(res)), float(max(res))


def _lookups(cap: int | None, repeats: int, llc: int, cache: dict | None = None) -> list[dict[str, Any]]:
    """FBGEMM TBE forward and forward+backward (fused row-wise Adagrad) over dims × table size relative to the
    last-level cache × access × batch; every rank measures at once, as ranks of a job do. `cache` (one dict for
    all rounds) keeps each table's TBE and each point's batch, which are the same in every round: building and
    initialising the two tables of 8 × the LLC cost ~5 s a rank per round, a fifth of the phase, and measured
    nothing (the rounds' kernels then run over tables already paged in, as round 1's did after its build)."""
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    from embedding.generate import WorkloadGenerator
    from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec

    cache = {} if cache is None else cache
    tbes, batches = cache.setdefault("tbes", {}), cache.setdefault("batches", {})
    pooling, points = 16, []
    for dim, mult in ((d, m) for d in DIMS for m in LLC_MULTIPLES):
        rows = lookup_rows(dim, mult, llc, cap)
        if (rows, dim) not in tbes:
            tbes[(rows, dim)] = SplitTableBatchedEmbeddingBagsCodegen(
                [(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
                optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)
        tbe = tbes[(rows, dim)]
        for access, batch in ((a, b) for a in ACCESS for b in BATCHES):
            key = (rows, dim, access, batch)
            if key not in batches:
                table = TableSpec("t", rows, dim, pooling=PoolingSpec("fixed", pooling),
                                  access=AccessSpec(access, 1.05))
                batches[key] = WorkloadGenerator(WorkloadSpec("calibrate", (table,), batch, 1)).batch(0)
            b = batches[key]
            idx, off = torch.from_numpy(b.indices), torch.from_numpy(b.offsets)

            def fwd(tbe=tbe, idx=idx, off=off) -> None:
                with torch.no_grad():
                    tbe(idx, off)

            def train(tbe=tbe, idx=idx, off=off) -> None:
                tbe(idx, off).sum().backward()

            ids = float(b.num_lookups)
            nbytes = ids * dim * 4 + ids * 8 + batch * dim * 4
            f, t = _median_time(fwd, repeats), _median_time(train, repeats)
            points.append({"dim": dim, "row_bytes": dim * 4, "rows": rows, "table_bytes": rows * dim * 4,
                           "llc_multiple": round(rows * dim * 4 / llc, 3), "access": access, "batch": batch,
                           "ids": ids, "unique_rows": int(np.unique(b.indices).size), "bytes": nbytes,
                           "fwd_s": f, "train_s": t, "fwd_gbps": nbytes / f / 1e9})
    return points


def _colocated(points: list[dict[str, Any]], cap: int | None, repeats: int, llc: int,
               cache: dict | None = None) -> dict[str, float]:
    """Co-located ranks share the host's memory bandwidth: rank 0 times the largest DRAM-bound forward alone
    (the others wait at a barrier) -> slowdown = the same point's time with every rank busy / alone. With
    `_lookups`' `cache`, on that point's own TBE and batch (the same kernel, forward only; building another
    table of 8 × the LLC cost ~2.5 s a round while the other ranks waited)."""
    import torch
    import torch.distributed as dist
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    from embedding.generate import WorkloadGenerator
    from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec

    p = max((q for q in points if q["access"] == "uniform"), key=lambda q: q["ids"] * q["dim"] * q["llc_multiple"])
    alone = 0.0
    if dist.get_rank() == 0:
        cache = cache or {}
        b = cache.get("batches", {}).get((p["rows"], p["dim"], "uniform", p["batch"]))
        if b is None:
            table = TableSpec("t", p["rows"], p["dim"], pooling=PoolingSpec("fixed", 16),
                              access=AccessSpec("uniform"))
            b = WorkloadGenerator(WorkloadSpec("calibrate", (table,), p["batch"], 1)).batch(0)
        idx, off = torch.from_numpy(b.indices), torch.from_numpy(b.offsets)
        tbe = cache.get("tbes", {}).get((p["rows"], p["dim"])) or SplitTableBatchedEmbeddingBagsCodegen(
            [(p["rows"], p["dim"], EmbeddingLocation.HOST, ComputeDevice.CPU)])

        def fwd() -> None:
            with torch.no_grad():
                tbe(idx, off)

        alone = _median_time(fwd, repeats)
    dist.barrier()
    box = [alone]
    dist.broadcast_object_list(box, src=0)
    return {"alone_s": float(box[0]), "together_s": p["fwd_s"], "slowdown": p["fwd_s"] / max(box[0], 1e-12),
            "point": {k: p[k] for k in ("dim", "rows", "access", "batch")}}


def _collectives(repeats: int) -> dict[str, list[dict[str, float]]]:
    """Per op: time of one call against the bytes a rank sends in it."""
    import torch
    import torch.distributed as dist

    w = dist.get_world_size()
    share = (w - 1) / w
    ops = {"all_to_all": (lambda d, s: dist.all_to_all_single(d, s), share),
           "reduce_scatter": (lambda d, s: dist.reduce_scatter_tensor(d[: s.numel() // w], s), share),
           "all_gather": (lambda d, s: dist.all_gather_into_tensor(d, s[: d.numel() // w]), share),
           "all_reduce": (lambda d, s: dist.all_reduce(s), 2 * share)}
    out: dict[str, list[dict[str, float]]] = {}
    for op, (fn, sent) in ops.items():
        out[op] = []
        for kib in COLLECTIVE_KIB:
            n = kib * 1024 // 4 // w * w
            src, dst = torch.ones(n), torch.empty(n)
            dist.barrier()
            t = _median_time(lambda dst=dst, src=src, fn=fn: fn(dst, src), repeats)
            out[op].append({"bytes_per_rank": n * 4, "sent_bytes": n * 4 * sent, "secs": t})
    return out


def _dense_optimizer(repeats: int) -> list[dict[str, float]]:
    """TorchRec RowWiseAdagrad step over a dense fp32 (rows, 64) table with a dense gradient."""
    import torch
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

    points = []
    for rows in DENSE_ROWS:
        p = torch.nn.Parameter(torch.zeros(rows, 64))
        p.grad = torch.rand(rows, 64)
        opt = RowWiseAdagrad([p], lr=0.01, eps=1e-8)
        points.append({"rows": rows, "bytes": rows * 64 * 4, "secs": _median_time(opt.step, repeats)})
    return points


_TYPES = {"TW": "table_wise", "RW": "row_wise", "CW": "column_wise", "TWRW": "table_row_wise",
          "DP": "data_parallel"}
# the larger plan of each type: 2·W tables both ranks look up at once, bytes like the validated workloads' but
# none of them (those run 8 tables of 200k×32, or 500k/300k×128, or the smoke mix)
BIG = {"rows": 100_000, "dp_rows": 10_000, "dim": 64, "batch": 512, "pooling": 16}


def _composed(overrides: list[str], cache: dict[tuple[str, ...], Any] | None):
    """`compose_dist(overrides)`, once per distinct overrides in `cache`: a Hydra compose costs 0.3–0.9 s on 2
    cores, and the 12 stage plans of 3 rounds ask for only 4 distinct configs (72 composes before: 2 per plan and round)."""
    from benchmarks.distributed.config import compose_dist

    if cache is None:
        return compose_dist(overrides)
    key = tuple(overrides)
    if key not in cache:
        cache[key] = compose_dist(overrides)
    return cache[key]


def _overhead_plan(kind: str, world: int, big: bool = False, stack: bool = False,
                   cache: dict[tuple[str, ...], Any] | None = None) -> tuple[list[str], dict]:
    """2·W tables of one sharding type (or 2·W table-wise + 2·W row-wise tables for "TW+RW"): tiny (1000 rows,
    dim 16, B 16, one id per bag: bytes ≈ 0) or `big` (`BIG`, uniform ids); `stack`: every table-wise table on
    rank 0 (the others hold none and wait). `cache`: composed configs kept across calls (`_composed`)."""
    from embedding.workload_config import build_workload
    from sharding.layouts import table_plan
    from sharding.plan import ShardingPlan, ShardingType

    n = 2 * world
    kinds = ["TW"] * n + ["RW"] * n if kind == "TW+RW" else [kind] * n
    rows = (BIG["dp_rows"] if kind == "DP" else BIG["rows"]) if big else 1000
    dim, batch, pool = (BIG["dim"], BIG["batch"], BIG["pooling"]) if big else (16, 16, 1)
    overrides = ["workload=smoke", f"workload.rows=[{','.join([str(rows)] * len(kinds))}]", f"workload.dim={dim}",
                 f"workload.batch_size={batch}", "workload.pooling.kind=fixed", f"workload.pooling.mean={pool}",
                 "workload.access.kind=uniform"]
    spec = build_workload(_composed(overrides, cache).workload)
    ranks, tables = list(range(world)), {}
    for i, (t, k) in enumerate(zip(spec.tables, kinds, strict=True)):
        st = ShardingType(_TYPES[k])
        where = [0 if stack else i % world] if st == ShardingType.TABLE_WISE else [(i + j) % world for j in ranks]
        tables[t.name] = table_plan(t, st, where, "ddr")
    name = f"calibrate_{kind}" + ("_big" if big else "") + ("_stack" if stack else "")
    return overrides, ShardingPlan(world, tables, optimizer=name).to_dict()


def _stage_times(world: int, repeats: int, shift: int = 0, cache: dict | None = None,
                 stack: bool = True) -> dict[str, Any]:
    """One round of the TorchRec stage plans ("TW", …, "TW+RW", "TW:big", …, and with `stack` "TW:stack"), in an
    order rotated by `shift`; the calibration runs "TW:stack" in its first round only (STACK_NOTE). `cache` (one
    dict for all rounds) keeps what is not measured and the same in every round: composed
    configs (`_composed`) and the initial weights per workload (`reference_state`: the five larger plans of
    4 × 100k × 64 share one; ~0.1 GB a rank), so a round spends its time building and stepping the plans:
    {"torchrec_stages_s": per plan and stage the median over steps (max over ranks, as every rank waits for the
    slowest), "torchrec_step_s": the uninstrumented step median (max over ranks), "torchrec_gap_s": the mean over
    ranks of a rank's own step median − the sum of its own stage medians}."""
    import torch
    import torch.distributed as dist

    from benchmarks.distributed.case import resolve_case
    from benchmarks.distributed.model import reference_state
    from benchmarks.distributed.worker import run_case

    cache = {} if cache is None else cache
    configs, states = cache.setdefault("configs", {}), cache.setdefault("states", {})

    plans = [(k, False, False) for k in OVERHEAD_PLANS] + [(k, True, False) for k in _TYPES] + [("TW", True, True)] * stack
    times: dict[str, dict[str, float]] = {}
    steps: dict[str, float] = {}
    gaps: dict[str, float] = {}
    seconds: dict[str, list[float]] = {}  # per plan: (building the DMP, the whole case), this rank's clock
    for i in rotated([str(i) for i in range(len(plans))], shift):
        kind, big, stack = plans[int(i)]
        key = f"{kind}:stack" if stack else (f"{kind}:big" if big else kind)
        t0 = time.perf_counter()
        overrides, plan = _overhead_plan(kind, world, big, stack, configs)
        cfg = _composed(overrides, configs)
        cfg = replace(cfg, dist=replace(cfg.dist, repeats=repeats, warmup=STAGE_WARMUP))  # as the overrides
        case = resolve_case(key, [*overrides, f"dist.repeats={repeats}", f"dist.warmup={STAGE_WARMUP}"], plan,
                            world, cfg)
        wkey = tuple(overrides)
        if wkey not in states:
            states[wkey] = reference_state(case.spec, case.cfg.dist.model)
        res = run_case(case, torch.device("cpu"), tempfile.gettempdir(), state=states[wkey])
        seconds[key] = [round(float(res.get("build_s", 0.0)), 3), round(time.perf_counter() - t0, 3)]
        gathered: list[Any] = [None] * world
        mine = {k: float(np.median(v)) for k, v in res["stages"].items()}
        step = float(np.median(res["step_s"]))
        gap = step - sum(mine[k] for k in STAGE_KEYS)  # the dense backward stays in: the model has no term for it
        dist.all_gather_object(gathered, dict(mine, step=step, gap=gap))
        times[key] = {k: max(g[k] for g in gathered) for k in STAGE_KEYS}
        steps[key] = max(g["step"] for g in gathered)
        gaps[key] = float(np.mean([g["gap"] for g in gathered]))
    return {"torchrec_stages_s": times, "torchrec_step_s": steps, "torchrec_gap_s": gaps, "stage_plan_s": seconds}


def stage_plan_bytes(world: int, llc_bytes: float, weights: dict[str, dict[str, float]],
                     ) -> dict[str, dict[str, float]]:
    """Per larger calibration plan ("TW:big", …): the cost model's bytes of each stage (`CostModel.stage_seconds`
    with every bandwidth 1), ids and row bytes that miss the LLC weighted as the model weights them."""
    from embedding.workload_config import build_workload
    from sharding.cost import CostModel
    from sharding.plan import ShardingPlan
    from sharding.topology import load_topology
    from sharding.workload import PlanWorkload

    unit = {g: {s: 1.0 for s in STAGE_KEYS} for g in _TYPES}
    out, configs = {}, {}  # the five plans compose two configs (`_composed`)
    for kind in _TYPES:
        overrides, plan = _overhead_plan(kind, world, big=True, cache=configs)
        cfg = _composed(overrides, configs)
        spec = replace(build_workload(cfg.workload), mode="train")
        topo = replace(load_topology(cfg.dist.hardware, ranks=world), stage_bandwidth=unit,
                       bwd_compute_multiplier=0.0, llc_bytes=float(llc_bytes), lookup_weights=weights)
        out[f"{kind}:big"] = CostModel(PlanWorkload.from_spec(spec), topo).stage_seconds(
            ShardingPlan.from_dict(plan)).get(kind, {})
    return out


def step_overhead(times: dict[str, dict[str, float]], steps: dict[str, float],
                  gaps: dict[str, float] | None = None) -> float:
    """Seconds per step outside the embedding stages (the dense part's backward, loss, zero_grad and the
    framework between stages; bytes ≈ 0), median over the tiny plans, at least 0. With `gaps` (per plan, the
    mean over ranks of a rank's own step median − the sum of its own stage medians): those. Else (files
    calibrated before they were stored): step − Σ stages, each the max over ranks, which the ranks' noise biases
    low (a sum of maxima of different ranks)."""
    if gaps:
        vals = [max(0.0, gaps[k]) for k in OVERHEAD_PLANS if k in gaps]
    else:
        vals = [max(0.0, steps[k] - sum(times[k].values())) for k in OVERHEAD_PLANS if k in steps and k in times]
    return float(np.median(vals)) if vals else 0.0


def pooled_values(key: str, world: int) -> int:
    """Pooled embedding values a rank's batch yields in stage plan `key` ("TW", "TW+RW", "TW:big", …): batch ×
    Σ table dims, what the loss, its backward and the dense gradients outside the stages run over."""
    kind, big = key.split(":")[0], key.endswith(":big")
    n = 4 * world if kind == "TW+RW" else 2 * world
    return (BIG["batch"] * BIG["dim"] if big else 16 * 16) * n


def step_overhead_per_value(gaps: dict[str, float], world: int) -> float:
    """Seconds the step outside the stages adds per pooled value (`pooled_values`): (median gap of the larger
    plans − median gap of the tiny plans) / (their median values' difference), at least 0. Medians, as
    `step_overhead`'s, so one plan's noise does not move it; 0 without both kinds of plan."""
    tiny = [k for k in OVERHEAD_PLANS if k in gaps]
    big = [k for k in gaps if k.endswith(":big")]
    if not tiny or not big:
        return 0.0
    dv = float(np.median([pooled_values(k, world) for k in big]) - np.median([pooled_values(k, world) for k in tiny]))
    dg = float(np.median([max(0.0, gaps[k]) for k in big]) - np.median([max(0.0, gaps[k]) for k in tiny]))
    return max(0.0, dg / dv) if dv > 0 else 0.0


def stacked(times: dict[str, dict[str, float]], world: int) -> dict[str, float]:
    """What stacking every table on one rank costs against the model's price (measured, not priced: the step's
    search prices a rank's load alone, `sharding.search`): the "TW:stack" plan holds the 2·W tables of "TW:big"
    on rank 0, W times the bytes of that plan's busiest rank. Per lookup stage, the lone rank's speed-up: W ×
    (big − tiny) / (stack − tiny) (1: as with every rank busy); "input_dist": (stack − tiny) / (W × (big −
    tiny)), the KJT all-to-all's time over the model's price (1: the holder pays for all the ids it receives).
    Empty without the stacked plan (files calibrated before it)."""
    st, big, tiny = times.get("TW:stack"), times.get("TW:big"), times.get("TW")
    if not (st and big and tiny):
        return {}
    out = {}
    for s in ("lookup", "lookup_bwd", "input_dist"):
        grow, stacked_grow = big[s] - tiny[s], st[s] - tiny[s]
        if grow > 0 and stacked_grow > 0:
            out[s] = (world * grow / stacked_grow if s != "input_dist" else stacked_grow / (world * grow))
    return out


def stage_overheads(times: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Fixed seconds per stage: "base" once per step, each type's group on top (see the module docstring)."""
    base = {k: max(0.0, times["TW"][k] + times["RW"][k] - times["TW+RW"][k]) for k in STAGE_KEYS}
    out = {"base": base}
    for kind in ("TW", "RW", "CW", "TWRW", "DP"):
        out[kind] = {k: max(0.0, times[kind][k] - base[k]) for k in STAGE_KEYS}
    return out


def stage_bandwidths(times: dict[str, dict[str, float]], nbytes: dict[str, dict[str, float]],
                     ) -> dict[str, dict[str, float]]:
    """Per type and stage, bytes/s of the byte-proportional part: (modelled bytes of the larger plan − tiny
    plan's ≈ 0) / (its stage time − the tiny plan's). Stages with no bytes or no measured growth are left out
    (the model then uses the microbenchmarks' figures)."""
    out: dict[str, dict[str, float]] = {}
    for kind in _TYPES:
        big, tiny = times.get(f"{kind}:big"), times.get(kind)
        if big is None or tiny is None:
            continue
        for stage, b in nbytes.get(f"{kind}:big", {}).items():
            dt = big[stage] - tiny[stage]
            if b > 0 and dt > 0:
                out.setdefault(kind, {})[stage] = float(b / dt)
    return out


PHASES = ("lookups", "dense_optimizer", "collectives", "torchrec_stages")
STACK_NOTE = ("the stacked plan (TW:stack), measured and not priced, runs in the first round only: at ~4 s a "
              "round it was the dearest stage plan, and its figures (`stacked`) are stored and printed, not fitted "
              "into anything the model reads; the figure is that round's, its spread over rounds empty")


def _rank_main(args: argparse.Namespace) -> int:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from benchmarks.perfmodel.machine import fingerprint, llc_bytes, loadavg, usable_cores

    # the cores this process may use (a container's CPU set, `taskset`), not the machine's
    torch.set_num_threads(max(1, usable_cores() // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        machine = fingerprint() if rank == 0 else {}  # before the others start: a quiet probe
        dist.barrier()
        ref = {"start": _reference(world)}  # every rank at once, as the measured ranks run
        llc, phases, rounds, cache, lookup_cache = llc_bytes(), dict.fromkeys(PHASES, 0.0), [], {}, {}
        for r in range(args.rounds):
            m: dict[str, Any] = {"order": rotated(PHASES, r)}
            for phase in m["order"]:  # every microbenchmark once per round, each round starting one later
                t0 = time.perf_counter()
                if phase == "lookups":
                    mine = _lookups(args.rows, args.repeats, llc, lookup_cache)
                    gathered: list[Any] = [None] * world
                    dist.all_gather_object(gathered, mine)
                    m["lookups"] = [p for g in gathered for p in g]
                    m["colocated"] = _colocated(mine, args.rows, args.repeats, llc, lookup_cache)
                elif phase == "dense_optimizer":
                    m["dense_optimizer"] = _dense_optimizer(args.repeats)
                elif phase == "collectives":
                    m["collectives"] = _collectives(args.repeats)
                else:
                    m.update(_stage_times(world, args.steps, r, cache, stack=r == 0))
                phases[phase] = round(phases[phase] + time.perf_counter() - t0, 2)
            m["loadavg"] = loadavg()
            rounds.append(m)
        lookup_cache.clear()  # the lookup tables (~1.8 GB a rank) before the end's reference probe
        ref["end"] = _reference(world)
        if rank == 0:
            machine["loadavg_end"] = loadavg()
            machine["reference"] = {**ref, "how": REFERENCE_HOW}
            write_yaml(args.out, rounds, world, {"machine": machine, "phase_s": phases, "llc": llc})
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


REFERENCE_HOW = ("benchmarks.perfmodel.reference.probe in every rank at once, median over ranks; at the start and "
                 "the end of the calibration (the calibration's reference: their geometric mean)")


def _reference(world: int) -> dict[str, float]:
    """The speed reference probed by every rank at once (after a barrier), each field's median over ranks."""
    import torch.distributed as dist

    from benchmarks.perfmodel.reference import combine, probe

    dist.barrier()
    mine = probe()
    got: list[Any] = [None] * world
    dist.all_gather_object(got, mine)
    return {**combine(got), "ranks": world}


def _fit_points(points: list[dict], x: str, y: str) -> tuple[float, float]:
    return fit_latency_bandwidth(np.array([p[x] for p in points]), np.array([p[y] for p in points]))


def fit_relative(points: list[dict], x: str, y: str) -> tuple[float, float]:
    """Least squares of the relative error of secs = latency + bytes / bw (each point weighted 1 / its time), so
    that a 4 KiB call's residual counts as much as a 4 MiB one's; (latency s ≥ 0, bandwidth bytes/s)."""
    from scipy.optimize import nnls

    xs, t = np.array([p[x] for p in points], dtype=float), np.array([p[y] for p in points], dtype=float)
    w = 1.0 / np.maximum(t, 1e-9)
    coef, _ = nnls(np.column_stack([np.ones_like(xs), xs]) * w[:, None], t * w)
    return float(coef[0]), float(1.0 / max(coef[1], 1e-15))


def lookup_weights(near: dict[str, float], near_bwd: dict[str, float], unique: bool = False,
                   ) -> dict[str, dict[str, float]]:
    """`Topology.lookup_weights` from the lookup fits, in near-core bytes: per stage an id's cost (id_s ·
    near_bandwidth). "dram" is written 0: the lookup grid and the measured jobs both replay a few batches, so
    their rows mostly stay in the cache and what the grid's table-size term measures (page walks over large
    tables, not LLC misses) moved held-out predictions further from the measured stages (see DRAM_NOTE).
    `unique` (the backward fitted per distinct row): "lookup_bwd" gets "unique_rows" 1, so the model prices
    the backward's row bytes per distinct row too (UNIQUE_NOTE)."""
    out = {stage: {"id_bytes": round(f["id_s"] * f["near_bandwidth"], 2), "dram": 0.0}
           for stage, f in (("lookup", near), ("lookup_bwd", near_bwd))}
    if unique:
        out["lookup_bwd"]["unique_rows"] = 1.0
        if near_bwd.get("row_s"):
            out["lookup_bwd"]["row_bytes"] = round(near_bwd["row_s"] * near_bwd["near_bandwidth"], 2)
    return out


UNIQUE_NOTE = ("unique_rows = 1: FBGEMM's CPU backward with the fused row-wise Adagrad update reads and writes each "
               "distinct row once; on the grid, a fit with separate per-id and per-distinct-row row bytes put "
               "(almost) all of them on the distinct rows (2026-12-02). The stage bandwidths are fitted on uniform "
               "plans (about every id its own row), so per id the model over-priced the backward of Zipf "
               "workloads 1.4–1.9× and priced uniform ones right")


DRAM_NOTE = ("dram = 0: with the grid's near / DRAM bandwidth ratio as the DRAM weight, the median step error on "
             "the 24 validate-cost plans rose (2026-12-01, two calibrations and their validate-cost runs: 14%→22% "
             "and 21%→23% without the id weight, 12%→18% and 17%→20% with it)")


def fit_round(m: dict[str, Any], llc: int, world: int = 2) -> dict[str, Any]:
    """Every term fitted on one round's measurements `m` (lookups of every rank, colocated, collectives, dense
    optimizer, TorchRec stage plans): the figures whose medians over rounds the calibration writes."""
    pts = m["lookups"]  # every rank's grid: concurrent measurements
    for p in pts:
        p["bwd_s"] = p["train_s"] - p["fwd_s"]
    call_s, bw = _fit_points(pts, "bytes", "fwd_s")
    bwd_call_s, bwd_bw = _fit_points(pts, "bytes", "bwd_s")
    comm, dense, stage = m["collectives"], m["dense_optimizer"], m["torchrec_stages_s"]
    links = {op: fit_relative(points, "sent_bytes", "secs") for op, points in comm.items()}
    opt_call_s, opt_bw = fit_relative(dense, "bytes", "secs")
    unique = per_unique_row(pts)
    near, near_bwd = fit_lookup(pts, llc), fit_lookup(pts, llc, "bwd_s", unique)
    fits = {"lookup fwd (c + near/bw + DRAM/bw)": (near["median_residual"], near["max_residual"]),
            "lookup bwd+update": (near_bwd["median_residual"], near_bwd["max_residual"]),
            "lookup fwd (c + bytes/bw, no cache)": residual(pts, "bytes", "fwd_s", (call_s, bw)),
            "dense optimizer": residual(dense, "bytes", "secs", (opt_call_s, opt_bw)),
            **{f"gloo {op}": residual(comm[op], "sent_bytes", "secs", links[op]) for op in comm}}
    overhead = stage_overheads(stage)
    return {"lookup_bandwidth": bw, "lookup_call_s": call_s, "bwd_call_s": bwd_call_s,
            "bwd_compute_multiplier": bw / bwd_bw, "forward": near, "backward": near_bwd,
            "lookup_weights": lookup_weights(near, near_bwd, unique),
            "colocated_slowdown": float(m["colocated"]["slowdown"]),
            "collectives": {op: {"latency": lat, "bandwidth": b} for op, (lat, b) in links.items()},
            "optimizer_call_s": opt_call_s, "optimizer_bandwidth": opt_bw, "stage_overhead": overhead,
            "fixed_tw_s": sum(overhead["base"].values()) + sum(overhead["TW"].values()),
            "step_overhead": step_overhead(stage, m["torchrec_step_s"], m.get("torchrec_gap_s")),
            "step_overhead_per_value": step_overhead_per_value(m.get("torchrec_gap_s") or {}, world),
            "stacked": stacked(stage, world),
            "residuals": {k: {"median": a, "max": b} for k, (a, b) in fits.items()}}


def fit_rounds(rounds: list[dict[str, Any]], world: int, llc: int) -> dict[str, Any]:
    """Each round fitted alone (`fit_round`), then each figure's median over rounds (`median_tree`). Stage
    bandwidths: the model's bytes of each larger plan, computed once with the median lookup weights (the bytes
    the model will price with), over each round's stage growth; a stage with no growth in a round counts as
    infinitely fast there, and is left out (microbenchmark figures used) when that is the median."""
    fits = [fit_round(m, llc, world) for m in rounds]
    med = median_tree(fits)
    ov = med["stage_overhead"]  # what the model will use: the per-stage medians' sum, not the median of the sums
    med["fixed_tw_s"] = sum(ov["base"].values()) + sum(ov["TW"].values())
    stage_bytes = stage_plan_bytes(world, llc, med["lookup_weights"])
    for f, m in zip(fits, rounds, strict=True):
        f["stage_bandwidth"] = stage_bandwidths(m["torchrec_stages_s"], stage_bytes)
    med["stage_bandwidth"] = median_tree([f["stage_bandwidth"] for f in fits], missing=float("inf"))
    return {"median": med, "rounds": fits, "spread": spread_tree(fits), "stage_bytes": stage_bytes}


def _g(x: float) -> str:
    return f"{x / 1e9:.2f}"


def _spread_lines(fit: dict[str, Any]) -> list[str]:
    """The printed figures: each term's median over rounds and [min–max] over rounds."""
    med, sp, n = fit["median"], fit["spread"], len(fit["rounds"])

    def term(label: str, path: tuple[str, ...], scale: float, unit: str, digits: int = 2) -> str:
        m, s = med, sp
        for k in path:
            m, s = m.get(k, {}), s.get(k, {})
        if not isinstance(m, float):
            return f"{label} —"
        lo, hi = s if isinstance(s, list) else (m, m)
        return f"{label} {m * scale:.{digits}f} [{lo * scale:.{digits}f}–{hi * scale:.{digits}f}]{unit}"

    out = [f"per term, median [min–max] over {n} rounds:",
           "  " + "; ".join([term("lookup bandwidth", ("lookup_bandwidth",), 1e-9, " GB/s"),
                             term("near-core", ("forward", "near_bandwidth"), 1e-9, " GB/s", 1),
                             term("per id", ("forward", "id_s"), 1e9, " ns"),
                             term("per call", ("forward", "call_s"), 1e6, " µs", 0),
                             term("backward multiplier", ("bwd_compute_multiplier",), 1, ""),
                             term("backward per id", ("backward", "id_s"), 1e9, " ns"),
                             term("co-located", ("colocated_slowdown",), 1, "×")]),
           "  " + "; ".join([term("dense optimizer", ("optimizer_bandwidth",), 1e-9, " GB/s")]
                            + [term(f"gloo {op}", ("collectives", op, "bandwidth"), 1e-9, " GB/s")
                               + " " + term("+", ("collectives", op, "latency"), 1e6, " µs", 0)
                               for op in med.get("collectives", {})]),
           "  " + "; ".join([term("fixed per step of a TW plan", ("fixed_tw_s",), 1e3, " ms"),
                             term("outside the stages", ("step_overhead",), 1e3, " ms"),
                             term("+ per pooled value (measured, not priced)", ("step_overhead_per_value",), 1e9,
                                  " ns", 1)])]
    if med.get("stacked"):
        out.append("  stacked on one rank (TW:stack; measured, not priced): " + "; ".join(
            [term("lone-rank lookup speed-up", ("stacked", "lookup"), 1, "×"),
             term("backward", ("stacked", "lookup_bwd"), 1, "×"),
             term("input all-to-all / the model's price", ("stacked", "input_dist"), 1, "")]))
    for kind, stages in med.get("stage_bandwidth", {}).items():
        out.append(f"  stage bandwidth {kind}: " + ", ".join(
            term(s, ("stage_bandwidth", kind, s), 1e-9, " GB/s", 3) for s in stages))
    return out


def write_yaml(out: str, rounds: list[dict[str, Any]], world: int, extra: dict[str, Any], how: str = "") -> None:
    """Fit every constant from each round's measurements, take each figure's median over rounds (`fit_rounds`)
    and write the hardware YAML (the measurements and per-round fits go in its `calibration` block, from which
    `--refit` fits again)."""
    from benchmarks.records import git_sha

    llc = int(extra["llc"])
    fit = fit_rounds(rounds, world, llc)
    med = fit["median"]
    bw, mult, opt_bw = med["lookup_bandwidth"], med["bwd_compute_multiplier"], med["optimizer_bandwidth"]
    links = {op: (v["latency"], v["bandwidth"]) for op, v in med["collectives"].items()}
    overhead, stage_bw, other = med["stage_overhead"], med["stage_bandwidth"], med["step_overhead"]
    near, near_bwd, weights = med["forward"], med["backward"], med["lookup_weights"]
    fits = {k: (v["median"], v["max"]) for k, v in med["residuals"].items()}
    n = len(rounds)
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    date = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    host = socket.gethostname()
    how = how or f"benchmarks.calibrate on {host}, {date}, git {git_sha()}, {world} gloo ranks measuring at once"
    per = f"median over {n} interleaved rounds of the fit of each round alone"
    a2a_lat, a2a_bw = links["all_to_all"]
    data = {
        "name": f"calibrated_{extra['machine'].get('host', host)}", "device": "cpu", "num_hosts": 1,
        "ranks_per_host": world, "reserved_fraction": 0.15, "bwd_compute_multiplier": round(mult, 3),
        "tiers": [{"name": "ddr", "capacity": float(mem // world), "bandwidth": bw,
                   "source": f"{how}: {per} of 1/slope of the least-squares line FBGEMM TBE forward time = c + "
                             f"bytes/bw over rows of {[d * 4 for d in DIMS]} B × tables of {list(LLC_MULTIPLES)} × "
                             f"the LLC × {list(ACCESS)} access × B {list(BATCHES)}, 16 ids/bag (grid below; "
                             f"c = {med['lookup_call_s'] * 1e6:.0f} µs per call); "
                             "capacity = physical memory / ranks"}],
        "intra_host": {"bandwidth": a2a_bw, "latency": a2a_lat,
                       "source": f"{how}: {per} of gloo all_to_all_single time = latency + sent/bw, 4 KiB-4 MiB"},
        "inter_host": {"bandwidth": 1.25e9, "latency": 50e-6,
                       "source": "not measured (one host): assumed 10 Gb/s Ethernet, as conf/hardware/dev_2core"},
        "collectives": {op: {"bandwidth": b, "latency": lat,
                             "source": f"{how}: {per} of the relative least squares of gloo {op} time = latency "
                                       "+ bytes sent per rank / bw, 4 KiB-4 MiB per rank (points below)"}
                        for op, (lat, b) in links.items()},
        "stage_overhead": overhead,
        "optimizer_bandwidth": opt_bw,
        "stage_bandwidth": stage_bw,
        "step_overhead": other,
        "llc_bytes": llc,
        "lookup_weights": weights,
        "not_priced": {  # measured and kept, not read by sharding.cost (see CostModel.outside for why)
            "step_overhead_per_value": med["step_overhead_per_value"],
            "stacked": {**med.get("stacked", {}), "source": f"{how}: the first round's; benchmarks.calibrate.stacked; {STACK_NOTE}"}},
        "machine": extra["machine"],
        "lookup_model": {"llc_bytes": llc, "forward": near, "backward": near_bwd,
                         "colocated_slowdown": round(float(med["colocated_slowdown"]), 3),
                         "source": f"{how}: {per} of the non-negative least squares of TBE time = c + bytes near "
                                   "the core / bw + row bytes from DRAM / bw (a row is in the LLC with the "
                                   "probability of a hot set of the LLC's size) over the lookup grid below; "
                                   "colocated_slowdown = the largest DRAM-bound forward with every rank busy / "
                                   "rank 0 alone"},
        "fit_residuals": {k: {"median": round(a, 4), "max": round(b, 4)} for k, (a, b) in fits.items()},
        "sources": {"provenance": how, "date": date,
                    "rounds": f"{n} rounds; each runs every microbenchmark once, in an order rotated by one per "
                              "round; every term is fitted on each round alone and the figure written is its "
                              "median over rounds (spread: calibration.term_spread, per-round fits: "
                              "calibration.round_fits; fit_residuals: medians over rounds)",
                    "step_overhead": "median over the tiny plans of the mean over ranks of (a rank's uninstrumented "
                                     "step median − the sum of its stage medians): loss, dense backward, "
                                     "framework",
                    "not_priced.step_overhead_per_value": "(median over the larger stage plans (B 512, dim 64) "
                                               "− median over the tiny plans of that gap, each at least 0) / (their "
                                               "pooled values per rank, batch × Σ dims, difference): the loss, its "
                                               "backward and dense gradients grow with them",
                    "bwd_compute_multiplier": "slope of TBE (fwd+bwd with fused row-wise Adagrad − fwd) time over "
                                              "bytes / slope of fwd time, same grid "
                                              f"(backward per-call cost {med['bwd_call_s'] * 1e6:.0f} µs)",
                    "llc_bytes": "the last-level cache (sysfs), shared by the host's tables in proportion to their "
                                 "bytes (sharding.cost.CostModel.llc_miss)",
                    "lookup_weights": "per lookup stage, from lookup_model's forward and backward fits: id_bytes "
                                      f"= id_s · near_bandwidth; {DRAM_NOTE}; {UNIQUE_NOTE}",
                    "stage_overhead": "TorchRec stage medians (max over ranks) on tiny tables, bytes ≈ 0: base = "
                                      "TW + RW − (TW+RW), type = type − base, clamped at 0",
                    "stage_bandwidth": f"per type and stage: modelled bytes of a larger plan ({2 * world} tables "
                                       f"{BIG}, DP: dp_rows; ids and row bytes that miss the LLC weighted by "
                                       "lookup_weights) / (its stage median − the tiny plan's), both measured in "
                                       "the same round (bytes below); missing: no growth measured in most "
                                       "rounds, microbenchmark figures used",
                    "optimizer_bandwidth": "1/slope of the relative least squares of TorchRec RowWiseAdagrad step "
                                           f"time = c + parameter bytes/bw on dense (rows, 64) fp32 tables "
                                           f"(c = {med['optimizer_call_s'] * 1e6:.0f} µs)"},
        "calibration": {"phase_s": extra["phase_s"], "rounds": rounds, "round_fits": fit["rounds"],
                        "term_spread": fit["spread"], "torchrec_stage_bytes": fit["stage_bytes"]},
    }
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, umask_mode())  # mkstemp's 0600 → what open() would give
    with os.fdopen(fd, "w") as f:
        f.write(f"# Fitted by {how}.\n")
        yaml.safe_dump(data, f, sort_keys=False, width=115, allow_unicode=True)
    os.replace(tmp, path)
    print(f"fit residuals, |fitted − measured| / measured (median, max; medians over {n} rounds): " + "; ".join(
        f"{k} {100 * a:.0f}%, {100 * b:.0f}%" for k, (a, b) in fits.items()))
    print("\n".join(_spread_lines(fit)))
    print(f"lookups: near-core {near['near_bandwidth'] / 1e9:.1f} GB/s, DRAM {near['dram_bandwidth'] / 1e9:.1f} GB/s "
          f"extra + {near['id_s'] * 1e9:.2f} ns per id + {near['call_s'] * 1e6:.0f} µs per call (backward: "
          f"{near_bwd['near_bandwidth'] / 1e9:.1f}, {near_bwd['dram_bandwidth'] / 1e9:.1f} GB/s, "
          f"{near_bwd['id_s'] * 1e9:.2f} ns, {near_bwd['call_s'] * 1e6:.0f} µs; LLC {llc / 2**20:.0f} MiB); "
          f"phases (s, summed over rounds) {extra['phase_s']}; load {extra['machine'].get('loadavg')} → "
          f"{extra['machine'].get('loadavg_end')}")
    for k, r in ((k, (extra["machine"].get("reference") or {}).get(k)) for k in ("start", "end")):
        if isinstance(r, dict):
            print(f"speed reference at the {k}: copy {r['copy_bandwidth'] / 1e9:.1f} GB/s, lookup "
                  f"{r['lookup_s'] * 1e3:.3f} ms, MLP {r['mlp_s'] * 1e3:.2f} ms"
                  + (f", all_reduce {r['sync_s'] * 1e6:.0f} µs" if "sync_s" in r else "")
                  + f" ({r.get('ranks')} ranks at once)")
    print(f"lookup bandwidth {_g(bw)} GB/s, backward multiplier {mult:.2f}, dense optimizer "
          f"{_g(opt_bw)} GB/s, gloo " + ", ".join(f"{op} {lat * 1e6:.0f} µs + {_g(b)} GB/s"
                                                 for op, (lat, b) in links.items())
          + f"; fixed per step of a TW plan {med['fixed_tw_s'] * 1e3:.2f} ms, outside the stages {other * 1e3:.2f} ms "
          f"(+ {med['step_overhead_per_value'] * 1e9:.1f} ns per pooled value, measured, not priced) "
          f"({per}) -> {path}")


def stored_rounds(cal: dict[str, Any]) -> list[dict[str, Any]]:
    """A calibrated file's measurements as rounds: its `rounds`, or (files written before rounds) one round of
    its stored medians, which refits as those files were fitted."""
    if cal.get("rounds"):
        return cal["rounds"]
    return [{"lookups": cal["lookups"], "colocated": cal["colocated"], "collectives": cal["collectives"],
             "dense_optimizer": cal["dense_optimizer"], "torchrec_stages_s": cal["torchrec_stages_s"],
             "torchrec_step_s": cal["torchrec_step_s"], "torchrec_gap_s": cal.get("torchrec_gap_s") or {}}]


def refit(src: str, out: str) -> None:
    """Fit a calibrated YAML's stored measurements (its `calibration` block) again with this code's model, and
    write the result to `out`: nothing is measured."""
    data = yaml.safe_load(Path(src).read_text())
    cal = data["calibration"]
    extra = {"machine": data["machine"], "phase_s": cal["phase_s"], "llc": data["lookup_model"]["llc_bytes"]}
    how = f"{data['sources']['provenance']}; refitted from {src} on {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"
    write_yaml(out, stored_rounds(cal), int(data["ranks_per_host"]), extra, how)


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="dlrmbench calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/hardware/calibrated.yaml", help="hardware YAML to write")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--rows", type=int, default=None,
                   help="cap on the rows of each lookup table (default: tables of 0.25 and 8 × the LLC)")
    p.add_argument("--repeats", type=int, default=REPEATS, help="timed calls per microbenchmark point per round")
    p.add_argument("--steps", type=int, default=STAGE_STEPS, help="timed steps of each TorchRec stage plan per "
                   "round (validate-cost's default --repeats)")
    p.add_argument("--rounds", type=int, default=ROUNDS,
                   help="interleaved rounds, each running every microbenchmark once and fitted alone; the "
                        "figures written are medians over rounds")
    p.add_argument("--timeout", type=float, default=300.0, help="collective timeout (s)")
    p.add_argument("--refit", default="", metavar="YAML", help="fit a calibrated file's stored measurements "
                   "again with this version's model and write --out; measures nothing")
    p.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    return p


def _refit_main(src: str, out: str) -> int:
    """`--refit`: check the source file and --out, then fit again (one line and exit 2 on bad input)."""
    try:
        check_output_file(out, "--out")
        data = yaml.safe_load(Path(src).read_text())
        cal = data.get("calibration") if isinstance(data, dict) else None
        need = ("lookups", "collectives", "dense_optimizer", "torchrec_stages_s", "torchrec_step_s")
        if (not isinstance(cal, dict) or "lookup_model" not in data
                or not (cal.get("rounds") or all(k in cal for k in need))):
            raise ValueError("it holds no calibration measurements (a file `dlrmbench calibrate` wrote has a "
                             "`calibration` block and a `lookup_model`)")
    except (OSError, ValueError, yaml.YAMLError) as e:
        print(f"dlrmbench calibrate: error: --refit {src!r}: {one_line(e)}", file=sys.stderr)
        return 2
    refit(src, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "calibrate":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    if (args.world_size < 2 or (args.rows is not None and args.rows < 1000) or args.repeats < 1 or args.rounds < 1
            or args.steps < 1 or not 0 < args.timeout <= 7 * 86400):
        print("dlrmbench calibrate: error: needs --world-size ≥ 2, --rows ≥ 1000, --repeats ≥ 1, --rounds ≥ 1, "
              f"--steps ≥ 1, 0 < --timeout ≤ 604800 s; got {args.world_size}, {args.rows}, {args.repeats}, "
              f"{args.rounds}, {args.steps}, "
              f"{args.timeout}", file=sys.stderr)
        return 2
    if args.refit:
        return _refit_main(args.refit, args.out)
    if not args.rank_worker:
        from benchmarks.distributed.launch import check_world_size

        try:
            check_output_file(args.out, "--out")
            check_world_size(args.world_size, 0.0, False)
        except ValueError as e:
            print(f"dlrmbench calibrate: error: {e}", file=sys.stderr)
            return 2
    if args.rank_worker:
        rc = _rank_main(args)  # an exception propagates as before (traceback, exit 1)
        sys.stdout.flush()
        sys.stderr.flush()
        # skip interpreter teardown: after a clean destroy_process_group, gloo's threads can still abort it
        # ("terminate called without an active exception", SIGABRT; seen once in CI) after the results are written
        os._exit(rc)
    from benchmarks.distributed.launch import launch_module

    rc = launch_module("benchmarks.calibrate", [*argv, "--rank-worker"], args.world_size, args.timeout)
    if rc == 0:
        from sharding.topology import load_topology

        topo = load_topology(args.out)
        print(f"loads as topology {topo.name!r}: {topo.world_size} ranks")
    return rc


if __name__ == "__main__":
    sys.exit(main())
