"""A short speed reference that follows the machine's state: what a rank gets now, against what it got when the
calibration was taken.

The probe (`probe`, about 1 s, one torch thread) times three fixed pieces of work, each in a fixed number of
blocks of a fixed number of calls (a counted budget, never a time limit); a figure is the median over blocks of a
block's time / its calls. A block lasts tens of ms, longer than a scheduler slice, so a rank that shares its core
(another rank, a busy loop) reads its share: a single 0.3 ms call runs whole between slices and would not.
  copy_bandwidth  numpy copies of a 32 MiB float64 array, bytes read + written / time per copy (memory-bound)
  lookup_s        one FBGEMM TBE forward (what DMP's fused kernel runs) over a fixed 200,000 × 64 fp32 table,
                  batch 512, 16 seeded uniform ids per bag (the step's lookup kernel)
  mlp_s           forward + backward of a fixed 256-wide 2-layer MLP on a batch of 256 (compute-bound)
  sync_s          (where the ranks share a gloo process group) one all_reduce of 1 KiB, every rank at once:
                  what a rank waits for the other's wake-up and the transport, the part of a gloo step's
                  collectives and stage overheads that the three single-process pieces do not see (on the 2-core
                  VM, four calibrations in one quiet half hour read copy and lookup within 15% of each other and
                  their collective and fixed stage terms up to 2.5x apart:
                  results/validation/calibrate_time_20261203.md)
It runs in every rank at once (`run_probes` starts `world` processes; `benchmarks.calibrate`'s ranks call
`probe` together), so a rank sharing a core with another, or with a busy loop, reads the share it gets, as a
measured step's rank does; the figure stored is each field's median over the ranks.

Ratios (`ratios`): bandwidth = copy bandwidth now / at calibration; compute = the geometric mean of the lookup's
and the MLP's time at calibration / now; sync = the all_reduce's time at calibration / now, where both have one.
All > 1 mean this machine is faster now. `rescale_hardware` reprices a calibration by them: every bandwidth
(tiers, collectives, stage, optimizer) × the bandwidth ratio, every fixed time (stage overheads, step
overhead(s), collective latencies) / the compute ratio (`mode="reference"`), or everything by the compute ratio
(`mode="compute"`). The sync ratio is printed and warned on, not priced: pricing fixed times by it instead of the
compute ratio took one calibration's rescored step error from 29% to 22% and another's from 27% to 48% on the same
24 measurements (2-core VM, load 2-6: results/validation/calibrate_time_20261203.md); the all_reduce's time moved
0.8-4.7 ms between rounds of one run, more than the steps did.
"""
from __future__ import annotations

import copy
import math
import statistics
import sys
from typing import Any

import numpy as np

__all__ = ["probe", "run_probes", "try_probes", "combine", "ratios", "rescale_hardware", "reference_of", "drift_warning",
           "REF_TOLERANCE", "FIELDS", "RESCALE_MODES"]

FIELDS = ("copy_bandwidth", "lookup_s", "mlp_s")
OPTIONAL = ("sync_s",)  # only where the probing ranks share a process group; older files lack it
REF_TOLERANCE = 0.25  # a quiet VM's reference repeats within ~10%; section 12's slow state was 3× off
RESCALE_MODES = ("none", "reference", "compute")
BLOCKS = 7  # timed blocks per piece of work; the figure is their median
COPY_MIB, COPY_CALLS = 32, 4  # calls per block
LOOKUP_ROWS, LOOKUP_DIM, LOOKUP_BATCH, LOOKUP_POOL, LOOKUP_CALLS = 200_000, 64, 512, 16, 50
MLP_WIDTH, MLP_BATCH, MLP_CALLS = 256, 256, 4
SYNC_FLOATS, SYNC_CALLS = 256, 50


def _median_call(fn, calls: int, blocks: int = BLOCKS, warmup: int = 2) -> float:
    """Median over `blocks` blocks of `calls` back-to-back calls of the block's time / `calls`."""
    import time

    for _ in range(warmup):
        fn()
    out = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls)
    return float(np.median(out))


def probe() -> dict[str, float]:
    """This process's reference figures (one torch thread; fixed sizes and call counts)."""
    import torch
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        src = np.ones(COPY_MIB * 2**20 // 8)
        dst = np.empty_like(src)
        copy_s = _median_call(lambda: np.copyto(dst, src), COPY_CALLS)
        tbe = SplitTableBatchedEmbeddingBagsCodegen(
            [(LOOKUP_ROWS, LOOKUP_DIM, EmbeddingLocation.HOST, ComputeDevice.CPU)])
        rng = np.random.default_rng(0)
        idx = torch.from_numpy(rng.integers(0, LOOKUP_ROWS, LOOKUP_BATCH * LOOKUP_POOL, dtype=np.int64))
        off = torch.arange(0, LOOKUP_BATCH * LOOKUP_POOL + 1, LOOKUP_POOL, dtype=torch.int64)
        with torch.no_grad():
            lookup_s = _median_call(lambda: tbe(idx, off), LOOKUP_CALLS)
        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(MLP_WIDTH, MLP_WIDTH), torch.nn.ReLU(),
                                  torch.nn.Linear(MLP_WIDTH, MLP_WIDTH))
        x = torch.rand(MLP_BATCH, MLP_WIDTH)

        def step() -> None:
            mlp.zero_grad(set_to_none=True)
            mlp(x).sum().backward()

        mlp_s = _median_call(step, MLP_CALLS)
        out = {"copy_bandwidth": 2 * src.nbytes / copy_s, "lookup_s": lookup_s, "mlp_s": mlp_s}
        sync = _sync_s()
        if sync is not None:
            out["sync_s"] = sync
    finally:
        torch.set_num_threads(threads)
    return out


def _sync_s() -> float | None:
    """Median per call of a 1 KiB all_reduce over the default process group (every rank calls it the same
    counted number of times), None without one or alone in it."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    buf = torch.ones(SYNC_FLOATS)
    dist.barrier()
    return _median_call(lambda: dist.all_reduce(buf), SYNC_CALLS)


def combine(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """One reference from every rank's probe: each field's median over the ranks (an optional field where every
    rank has it)."""
    keys = FIELDS + tuple(k for k in OPTIONAL if per_rank and all(k in p for p in per_rank))
    return {k: float(statistics.median(float(p[k]) for p in per_rank)) for k in keys}


def run_probes(world: int) -> dict[str, float]:
    """The reference with `world` processes probing at once (as `world` ranks of a job run): started with
    spawn (no state shared with this process), they import first, join one gloo group (for `sync_s`) and start
    together at a barrier."""
    import multiprocessing as mp
    import tempfile
    from pathlib import Path

    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(world), ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="dlrmbench-probe-") as tmp:
        init = f"file://{Path(tmp) / 'store'}"
        procs = [ctx.Process(target=_warm_then_probe, args=(barrier, queue, rank, world, init))
                 for rank in range(world)]
        for p in procs:
            p.start()
        out = [queue.get() for _ in procs]
        for p in procs:
            p.join()
    return {**combine(out), "ranks": world}


def try_probes(world: int) -> dict[str, float] | None:
    """`run_probes(world)`, or None with one warning line when it cannot run (a failed probe must not lose the
    measurements it stands beside: `perfmodel collect`, `validate-cost`)."""
    from benchmarks.errors import one_line

    try:
        return run_probes(world)
    except Exception as e:  # noqa: BLE001
        print(f"warning: the speed reference did not run: {one_line(e)}", file=sys.stderr)
        return None


def _warm_then_probe(barrier, queue, rank: int = 0, world: int = 1, init: str = "") -> None:  # pragma: no cover
    import fbgemm_gpu.split_table_batched_embeddings_ops_training  # noqa: F401
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if world > 1 and init:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        barrier.wait()
        queue.put(probe())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def reference_of(data: dict[str, Any]) -> dict[str, float] | None:
    """A calibration's reference (`machine.reference`): the geometric mean of its start and end probes per
    field (the state the calibration's terms were measured in, between the two), or None when it has none; an
    optional field where both have it."""
    ref = (data.get("machine") or {}).get("reference") or {}
    probes = [ref[k] for k in ("start", "end") if isinstance(ref.get(k), dict)]
    if not probes or any(not all(float(p.get(f) or 0) > 0 for f in FIELDS) for p in probes):
        return None
    keys = FIELDS + tuple(f for f in OPTIONAL if all(float(p.get(f) or 0) > 0 for p in probes))
    return {f: math.exp(sum(math.log(float(p[f])) for p in probes) / len(probes)) for f in keys}


def ratios(now: dict[str, float], cal: dict[str, float]) -> dict[str, float]:
    """{"bandwidth": copy bandwidth now / at calibration, "compute": geometric mean of (lookup, MLP) time at
    calibration / now, "sync": all_reduce time at calibration / now (only where both have one)}; > 1: faster
    now."""
    out = {"bandwidth": float(now["copy_bandwidth"]) / float(cal["copy_bandwidth"]),
           "compute": math.sqrt(float(cal["lookup_s"]) / float(now["lookup_s"])
                                * float(cal["mlp_s"]) / float(now["mlp_s"]))}
    if float(now.get("sync_s") or 0) > 0 and float(cal.get("sync_s") or 0) > 0:
        out["sync"] = float(cal["sync_s"]) / float(now["sync_s"])
    return out


def drift_warning(r: dict[str, float], where: str, tolerance: float = REF_TOLERANCE,
                  against: str = "the calibration's") -> str | None:
    """One warning line when any ratio is off 1 by more than `tolerance`, else None."""
    if all(abs(v - 1) <= tolerance for v in r.values()):
        return None
    sync = f", sync ×{r['sync']:.2f}" if "sync" in r else ""
    return (f"warning: {where}: the speed reference reads bandwidth ×{r['bandwidth']:.2f}, compute "
            f"×{r['compute']:.2f}{sync} of {against} (tolerance ±{100 * tolerance:.0f}%): the calibrated prices "
            "may be off by as much (validate-cost --rescale reference prices by it)")


def rescale_hardware(data: dict[str, Any], r: dict[str, float], mode: str = "reference") -> dict[str, Any]:
    """A copy of the hardware YAML `data` priced at the speed `r` (`ratios`): bandwidths × r["bandwidth"]
    (`mode` "reference") or × r["compute"] ("compute"); fixed times / r["compute"]. "none": an unchanged copy.
    Byte weights (lookup_weights), the backward multiplier and capacities are ratios or sizes: unchanged."""
    if mode not in RESCALE_MODES:
        raise ValueError(f"rescale mode {mode!r}: allowed {', '.join(RESCALE_MODES)}")
    out = copy.deepcopy(data)
    if mode == "none":
        return out
    bw = float(r["bandwidth"] if mode == "reference" else r["compute"])
    ct = float(r["compute"])
    if not (bw > 0 and ct > 0):
        raise ValueError(f"rescale ratios must be > 0, got {r}")
    for t in out.get("tiers") or []:
        t["bandwidth"] = float(t["bandwidth"]) * bw
    for link in [out.get("intra_host"), *(out.get("collectives") or {}).values()]:
        if isinstance(link, dict):
            link["bandwidth"] = float(link["bandwidth"]) * bw
            link["latency"] = float(link.get("latency", 0.0)) / ct
    if out.get("optimizer_bandwidth"):
        out["optimizer_bandwidth"] = float(out["optimizer_bandwidth"]) * bw
    for group in (out.get("stage_bandwidth") or {}).values():
        for k in group:
            group[k] = float(group[k]) * bw
    for group in (out.get("stage_overhead") or {}).values():
        for k in group:
            group[k] = float(group[k]) / ct
    for k in ("step_overhead", "step_overhead_per_value"):
        if out.get(k):
            out[k] = float(out[k]) / ct
    out["rescaled"] = {"mode": mode, "bandwidth": bw, "compute": ct,
                       "how": "benchmarks.perfmodel.reference.rescale_hardware: bandwidths × bandwidth, fixed "
                              "times / compute"}
    return out


if __name__ == "__main__":  # pragma: no cover
    import json

    print(json.dumps(run_probes(int(sys.argv[1]) if len(sys.argv) > 1 else 1)))
