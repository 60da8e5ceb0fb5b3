"""Microbenchmark (issue 19): what a gloo all_to_all_single costs when its traffic is one-sided (one rank
receives everything, the other sends everything, as a plan with every table on one rank makes TorchRec's KJT
input dist and pooled output dist) versus balanced (each rank sends half), at the same bytes crossing ranks.
The cost model prices a collective by the bytes its busiest rank moves; this tells which per-rank byte count
(sent, received, their max, sum or the mean over ranks) the measured time follows.

Run: python -m benchmarks.a2a_skew [--repeats N] [--out FILE]  (spawns 2 gloo ranks on this host)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

KIB = (16, 64, 256, 1024, 4096, 16384)  # bytes crossing ranks per call, the model's "bytes that leave a rank"
SHAPES = ("balanced", "one_sided")


def _worker(rank: int, world: int, repeats: int, out: str, port: int) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = []
    for rep in range(2):  # alternate shapes and sizes twice: drift in machine load hits both alike
        for kib in KIB:
            cross = kib * 1024 // 4  # floats crossing ranks in total
            for shape in SHAPES if rep == 0 else SHAPES[::-1]:
                if shape == "balanced":  # each rank sends cross/2 to the peer and keeps cross/2
                    send = [cross // 2, cross // 2]
                    recv = list(send)
                else:  # rank 1 sends all to rank 0; rank 0 keeps its part and sends nothing
                    send = [cross // 2, 0] if rank == 0 else [cross, 0]
                    recv = [cross // 2, cross] if rank == 0 else [0, 0]
                src, dst = torch.ones(sum(send)), torch.empty(sum(recv))
                times = []
                for i in range(repeats + 2):
                    dist.barrier()
                    t0 = time.perf_counter()
                    dist.all_to_all_single(dst, src, recv, send)
                    if i >= 2:
                        times.append(time.perf_counter() - t0)
                got: list = [None] * world
                dist.all_gather_object(got, statistics.median(times))
                if rank == 0:
                    rows.append({"shape": shape, "cross_bytes": cross * 4, "rep": rep,
                                 "secs_per_rank": got, "secs": max(got)})
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"loadavg": open("/proc/loadavg").read().split()[:3], "repeats": repeats, "rows": rows}, f)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    import torch.multiprocessing as mp

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--out", default="a2a_skew.json")
    ap.add_argument("--port", type=int, default=29531)
    a = ap.parse_args(argv)
    if a.repeats < 1:
        print("--repeats must be >= 1", file=sys.stderr)
        return 2
    mp.spawn(_worker, args=(2, a.repeats, a.out, a.port), nprocs=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
