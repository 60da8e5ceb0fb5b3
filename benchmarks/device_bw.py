"""`dlrmbench device-bw [--device cuda] [--rows N] [--out FILE]`: one device's lookup bandwidth for the cost model's
memory tier, measured with the torch-native kernel that runs everywhere (no FBGEMM needed).

  lookup       torch.nn.EmbeddingBag (mode sum) forward on one table of `--rows` rows per row size (dims 16, 64,
               128, 256: 64 B to 1 KiB rows) × locality (uniform, bounded Zipf 1.05 with hot rows scattered, from
               embedding.generate) × batch (2,048 and 16,384 bags of 32 ids). Bytes as the sharding cost model
               counts a lookup: ids·dim·4 (rows read) + ids·8 (indices) + bags·dim·4 (pooled output). Per locality,
               least squares of time = c + bytes / bw: bw is the tier bandwidth, c the per-call cost.
  training     the same bag with sparse gradients, backward of a fixed output gradient, then an SGD row update
               (index_add_ of −lr·grad): multiplier = slope of (train − forward) time over bytes / slope of the
               forward time, the cost model's `bwd_compute_multiplier` for this kernel.
  copies       device-to-device copy of 1 GiB (bytes read + written), host-to-device and device-to-host of
               256 MiB of pinned host memory: the ceilings the figures above are read against.
Each point is the median of `--repeats` timed calls after 3 warm-ups (CUDA events on the GPU, perf_counter on the
CPU). The YAML written records the device, versions, date and this method, for `conf/hardware/` sources.
"""
from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from typing import Any

import numpy as np
import torch
import yaml

from embedding.files import umask_mode
from embedding.generate import WorkloadGenerator
from embedding.spec import AccessSpec, PoolingSpec, TableSpec, WorkloadSpec

from .calibrate import fit_latency_bandwidth as fit
from .errors import OneLineParser
from .timing import time_calls

__all__ = ["measure", "main"]

DIMS = (16, 64, 128, 256)
BATCHES = (2048, 16384)
POOLING = 32
ACCESS = {"uniform": AccessSpec("uniform"), "zipf1.05": AccessSpec("zipf", 1.05)}


def _indices(rows: int, dim: int, batch: int, access: AccessSpec, seed: int) -> np.ndarray:
    table = TableSpec("t", rows, dim, pooling=PoolingSpec("fixed", POOLING), access=access)
    return WorkloadGenerator(WorkloadSpec("bw", (table,), batch_size=batch, num_batches=1, seed=seed)).batch(0).indices


def _point(bag: torch.nn.EmbeddingBag, idx: torch.Tensor, batch: int, device: torch.device,
           repeats: int) -> tuple[float, float]:
    """(forward seconds, training-step seconds), medians."""
    offsets = torch.arange(0, batch * POOLING, POOLING, device=device)
    with torch.no_grad():
        fwd = time_calls(lambda _: bag(idx, offsets), 1, 3, repeats, device).median
    grad = torch.ones(batch, bag.embedding_dim, device=device)

    def step(_: int) -> None:
        bag.weight.grad = None
        bag(idx, offsets).backward(grad)
        g = bag.weight.grad.coalesce()
        with torch.no_grad():
            bag.weight.index_add_(0, g.indices()[0], g.values(), alpha=-1e-6)

    train = time_calls(step, 1, 3, repeats, device).median
    return fwd, train


def _copies(device: torch.device, repeats: int) -> dict[str, float]:
    out: dict[str, float] = {}
    n = (1 << 30) // 4
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    t = time_calls(lambda _: dst.copy_(src), 1, 3, repeats, device).median
    out["copy_bw"] = float(2 * n * 4 / t)
    if device.type == "cuda":
        m = (256 << 20) // 4
        host = torch.ones(m).pin_memory()
        dev = torch.empty(m, device=device)
        out["h2d_pinned_bw"] = float(m * 4) / time_calls(lambda _: dev.copy_(host, non_blocking=True), 1, 3, repeats,
                                                  device).median
        out["d2h_pinned_bw"] = float(m * 4) / time_calls(lambda _: host.copy_(dev, non_blocking=True), 1, 3, repeats,
                                                  device).median
    return out


def measure(device: torch.device, rows: int, repeats: int = 20, dims: tuple[int, ...] = DIMS,
            batches: tuple[int, ...] = BATCHES) -> dict[str, Any]:
    """All points, the fits and the copy ceilings, as the YAML-ready dict `main` writes."""
    points = []
    for dim in dims:
        bag = torch.nn.EmbeddingBag(rows, dim, mode="sum", sparse=True, device=device)
        for name, access in ACCESS.items():
            for batch in batches:
                idx = torch.from_numpy(_indices(rows, dim, batch, access, seed=dim)).to(device)
                fwd, train = _point(bag, idx, batch, device, repeats)
                ids = batch * POOLING
                nbytes = ids * dim * 4 + ids * 8 + batch * dim * 4
                points.append({"access": name, "dim": dim, "batch": batch, "bytes": int(nbytes), "forward_s": float(fwd),
                               "train_s": float(train), "forward_gbps": float(nbytes / fwd / 1e9)})
        del bag
        if device.type == "cuda":
            torch.cuda.empty_cache()
    fits: dict[str, Any] = {}
    for name in ACCESS:
        sel = [p for p in points if p["access"] == name]
        b = np.array([p["bytes"] for p in sel], dtype=float)
        f = np.array([p["forward_s"] for p in sel])
        tr = np.array([p["train_s"] for p in sel])
        c, bw = fit(b, f)
        _, bw_extra = fit(b, tr - f)
        fits[name] = {"bandwidth": bw, "per_call_s": c, "bwd_compute_multiplier": bw / bw_extra}
    env = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
           "torch": str(torch.__version__), "cuda": torch.version.cuda, "host": platform.node(),
           "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
           "date": time.strftime("%Y-%m-%d"), "rows": rows, "repeats": repeats}
    return {"env": env, "method": __doc__.split("\n\n")[0] + " See benchmarks/device_bw.py for the method.",
            "lookup": fits, "copies": _copies(device, max(5, repeats // 2)), "points": points}


def _print(res: dict[str, Any]) -> None:
    print(f"{res['env']['device']}, torch {res['env']['torch']}, {res['env']['rows']:,} rows per table")
    print(f"{'access':>9} {'dim':>4} {'batch':>6} {'fwd µs':>9} {'train µs':>9} {'fwd GB/s':>9}")
    for p in res["points"]:
        print(f"{p['access']:>9} {p['dim']:>4} {p['batch']:>6} {p['forward_s'] * 1e6:>9.1f} "
              f"{p['train_s'] * 1e6:>9.1f} {p['forward_gbps']:>9.1f}")
    for name, f in res["lookup"].items():
        print(f"fit {name}: bandwidth {f['bandwidth'] / 1e9:.1f} GB/s, per call {f['per_call_s'] * 1e6:.1f} µs, "
              f"backward+update multiplier {f['bwd_compute_multiplier']:.2f}")
    print("copies: " + ", ".join(f"{k} {v / 1e9:.1f} GB/s" for k, v in res["copies"].items()))


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(prog="dlrmbench device-bw", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, default=0, help="rows per table (default 8 M on cuda, 1 M on cpu)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default="", help="YAML file to write (atomically)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("dlrmbench device-bw: --device cuda but torch sees no GPU", file=sys.stderr)
        return 2
    if args.rows < 0 or args.repeats < 1:
        print("dlrmbench device-bw: --rows must be ≥ 0 and --repeats ≥ 1", file=sys.stderr)
        return 2
    rows = args.rows or (8 << 20 if device.type == "cuda" else 1 << 20)
    res = measure(device, rows, args.repeats, DIMS, BATCHES)
    _print(res)
    if args.out:
        d = os.path.dirname(os.path.abspath(args.out))
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        os.fchmod(fd, umask_mode())  # mkstemp's 0600 → what open() would give
        with os.fdopen(fd, "w") as fh:
            yaml.safe_dump(res, fh, sort_keys=False, allow_unicode=True)
        os.replace(tmp, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
