"""`dlrmbench calibrate [--out FILE] [--world-size N] [--rows N] [--quick]`: fit the cost model's constants on
this machine and write a hardware YAML that `sharding.topology.load_topology` reads, with provenance and date.

Runs as a job of N local ranks (gloo/CPU), every rank measuring at once as ranks of a real job do:
  lookup bandwidth   FBGEMM TBE forward (what DMP's fused kernel runs) on one table per row size
                     (dims 16/64/128: 64/256/512-byte rows) × locality (uniform, Zipf 1.05), B 512, 16 ids per bag;
                     bytes as the cost model counts them: ids·dim·4 + ids·8 + bags·dim·4. The tier bandwidth is
                     the least-squares fit of time = bytes / bw over the grid (every point kept in the YAML).
  backward           the same TBE trained with EXACT_ROWWISE_ADAGRAD: multiplier = (fwd+bwd − fwd) / fwd, median.
  collectives        gloo all_to_all_single of 4 KiB … 4 MiB per rank; least squares of time = latency +
                     bytes·(W−1)/W / bandwidth (the cost model's all-to-all formula) gives the link bandwidth.
  stage latency      TorchRec's own dist stages on a tiny table-wise table (bytes ≈ 0): (input_dist + output_dist
                     + output_dist_bwd) / 2 passes is the per-collective-kind, per-pass latency the cost model adds.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

__all__ = ["main", "fit_bandwidth", "fit_latency_bandwidth"]

DIMS = (16, 64, 128)
ACCESS = ("uniform", "zipf")


def fit_bandwidth(nbytes: np.ndarray, secs: np.ndarray) -> float:
    """Least squares of secs = bytes / bw through the origin: bw = Σb² / Σ(b·t)."""
    return float(np.sum(nbytes**2) / np.sum(nbytes * secs))


def fit_latency_bandwidth(nbytes: np.ndarray, secs: np.ndarray) -> tuple[float, float]:
    """Least squares of secs = latency + bytes / bw; (latency s ≥ 0, bandwidth bytes/s)."""
    slope, intercept = np.polyfit(nbytes, secs, 1)
    return max(float(intercept), 0.0), float(1.0 / max(slope, 1e-15))


def _median_time(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def _lookups(rows: int, repeats: int) -> list[dict[str, Any]]:
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    from embedding.generate import WorkloadGenerator
    from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec

    batch, pooling, points = 512, 16, []
    for dim in DIMS:
        for access in ACCESS:
            table = TableSpec("t", rows, dim, pooling=PoolingSpec("fixed", pooling),
                              access=AccessSpec(access, 1.05))
            b = WorkloadGenerator(WorkloadSpec("calibrate", (table,), batch, 1)).batch(0)
            idx, off = torch.from_numpy(b.indices), torch.from_numpy(b.offsets)
            tbe = SplitTableBatchedEmbeddingBagsCodegen(
                [(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
                optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)

            def fwd(tbe=tbe, idx=idx, off=off) -> None:
                with torch.no_grad():
                    tbe(idx, off)

            def train(tbe=tbe, idx=idx, off=off) -> None:
                tbe(idx, off).sum().backward()

            ids = float(b.num_lookups)
            nbytes = ids * dim * 4 + ids * 8 + batch * dim * 4
            f, t = _median_time(fwd, repeats), _median_time(train, repeats)
            points.append({"dim": dim, "row_bytes": dim * 4, "access": access, "bytes": nbytes, "fwd_s": f,
                           "train_s": t, "fwd_gbps": nbytes / f / 1e9})
    return points


def _collectives(repeats: int) -> list[dict[str, float]]:
    import torch
    import torch.distributed as dist

    w, points = dist.get_world_size(), []
    for kib in (4, 16, 64, 256, 1024, 4096):
        n = kib * 1024 // 4 // w * w
        src, dst = torch.ones(n), torch.empty(n)
        dist.barrier()
        t = _median_time(lambda dst=dst, src=src: dist.all_to_all_single(dst, src), repeats)
        points.append({"bytes_per_rank": n * 4, "sent_bytes": n * 4 * (w - 1) / w, "secs": t})
    return points


def _stage_latency(world: int, repeats: int) -> dict[str, float]:
    import torch

    from benchmarks.distributed.case import resolve_case
    from benchmarks.distributed.worker import run_case

    case = resolve_case("calibrate", ["workload=smoke", "workload.rows=[1000]", "workload.dim=16",
                                      "workload.batch_size=16", "workload.pooling.kind=fixed",
                                      "workload.pooling.mean=1", f"dist.repeats={repeats}",
                                      "dist.plan=round_robin"], None, world)
    res = run_case(case, torch.device("cpu"), tempfile.gettempdir())
    med = {k: float(np.median(v)) for k, v in res["stages"].items()}
    return {**med, "per_kind_per_pass_s": (med["input_dist"] + med["output_dist"] + med["output_dist_bwd"]) / 2}


def _rank_main(args: argparse.Namespace) -> int:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        dist.barrier()
        lookups = _lookups(args.rows, args.repeats)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, lookups)
        comm = _collectives(args.repeats)
        stage = _stage_latency(world, args.repeats)
        if rank == 0:
            write_yaml(args.out, gathered, comm, stage, world, args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def write_yaml(out: str, lookups: list[list[dict]], comm: list[dict], stage: dict, world: int,
               args: argparse.Namespace) -> None:
    from benchmarks.records import git_sha

    pts = [p for rank_points in lookups for p in rank_points]  # every rank's grid: concurrent measurements
    nbytes, fwd = np.array([p["bytes"] for p in pts]), np.array([p["fwd_s"] for p in pts])
    bw = fit_bandwidth(nbytes, fwd)
    mult = float(np.median([(p["train_s"] - p["fwd_s"]) / p["fwd_s"] for p in pts]))
    _, link_bw = fit_latency_bandwidth(np.array([c["sent_bytes"] for c in comm]), np.array([c["secs"] for c in comm]))
    lat = stage["per_kind_per_pass_s"]
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    date = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    host = socket.gethostname()
    how = f"benchmarks.calibrate on {host}, {date}, git {git_sha()}, {world} gloo ranks measuring at once"
    data = {
        "name": f"calibrated_{host}", "device": "cpu", "num_hosts": 1, "ranks_per_host": world,
        "reserved_fraction": 0.15, "bwd_compute_multiplier": round(mult, 3),
        "tiers": [{"name": "ddr", "capacity": float(mem // world), "bandwidth": bw,
                   "source": f"{how}: least-squares fit of FBGEMM TBE forward time = bytes/bw over rows of "
                             f"{[d * 4 for d in DIMS]} B × {list(ACCESS)} access, {args.rows} rows, B 512, "
                             "16 ids/bag (grid below); capacity = physical memory / ranks"}],
        "intra_host": {"bandwidth": link_bw, "latency": lat,
                       "source": f"{how}: bandwidth = fit of gloo all_to_all_single time = a + sent/bw, "
                                 "4 KiB-4 MiB; latency = TorchRec input_dist + output_dist + output_dist_bwd "
                                 "on a tiny table-wise table / 2 passes"},
        "inter_host": {"bandwidth": 1.25e9, "latency": 50e-6,
                       "source": "not measured (one host): assumed 10 Gb/s Ethernet, as conf/hardware/dev_2core"},
        "sources": {"provenance": how, "date": date,
                    "bwd_compute_multiplier": "median over the grid of (TBE fwd+bwd with fused row-wise Adagrad "
                                              "− fwd) / fwd"},
        "calibration": {"lookups": pts, "all_to_all": comm, "torchrec_stages_tiny_tw_s": stage},
    }
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(f"# Fitted by {how}.\n")
        yaml.safe_dump(data, f, sort_keys=False, width=115, allow_unicode=True)
    os.replace(tmp, path)
    print(f"lookup bandwidth {bw / 1e9:.2f} GB/s, backward multiplier {mult:.2f}, gloo all-to-all "
          f"{link_bw / 1e9:.2f} GB/s, stage latency {lat * 1e3:.3f} ms -> {path}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dlrmbench calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/hardware/calibrated.yaml", help="hardware YAML to write")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of each lookup table (per rank)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--timeout", type=float, default=300.0, help="collective timeout (s)")
    p.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "calibrate":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    if args.world_size < 2 or args.rows < 1000 or args.repeats < 1:
        print("dlrmbench calibrate: error: needs --world-size ≥ 2, --rows ≥ 1000, --repeats ≥ 1", file=sys.stderr)
        return 2
    if args.rank_worker:
        return _rank_main(args)
    from benchmarks.distributed.launch import launch_module

    rc = launch_module("benchmarks.calibrate", [*argv, "--rank-worker"], args.world_size, args.timeout)
    if rc == 0:
        from sharding.topology import load_topology

        topo = load_topology(args.out)
        print(f"loads as topology {topo.name!r}: {topo.world_size} ranks")
    return rc


if __name__ == "__main__":
    sys.exit(main())
