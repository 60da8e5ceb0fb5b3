"""A seeded family of planning instances the optimizer has never been tuned on (`python -m benchmarks.plan_family`).

Each instance is drawn from its own seed (`instance(seed)`), so instance k is the same whatever the family's size:
- hardware: TorchRec's default `Topology` (`torchrec_default`: what TorchRec's planner assumes), 8–256 ranks in
  1–32 hosts of 4 or 8, HBM per rank 16–80 GiB;
- tables: a few heavy ones (10–200 M rows, dim 64–256, pooling 10–200) and many small ones (100 rows – 5 M,
  log-uniform; dims 4–512; pooling 1–200, log-normal around 3), 8–1000 tables in all;
- batch per rank 512–64 k (log-uniform), training or inference (1 in 3);
- memory-tight (1 in 4): HBM set so the tables take 60–140% of all ranks' usable HBM, so row-wise, UVM or caching
  is needed (the DDR tier, 128 GiB per rank, always holds the rest).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedding.spec import AccessSpec, PoolingSpec, TableSpec
from sharding.topology import Topology, load_topology
from sharding.workload import PlanWorkload

__all__ = ["Instance", "instance", "family"]

DIMS = (4, 8, 16, 32, 64, 128, 256, 512)
DIM_WEIGHTS = (0.05, 0.1, 0.2, 0.2, 0.2, 0.15, 0.07, 0.03)
WORLDS = (8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Instance:
    """One planning problem and how it was drawn."""

    name: str
    seed: int
    workload: PlanWorkload
    topology: Topology
    tight: bool  # HBM sized to the tables (row-wise, UVM or caching needed)

    @property
    def label(self) -> str:
        wl, t = self.workload, self.topology
        return (f"{self.name}: {len(wl.tables)} tables, {t.world_size} ranks ({t.num_hosts}×{t.ranks_per_host}), "
                f"HBM {t.fast.capacity / 2**30:.1f} GiB, batch {wl.batch_size}, {wl.mode}{', tight' if self.tight else ''}")


def _tables(rng: np.random.Generator, count: int) -> tuple[TableSpec, ...]:
    heavy = int(min(count, rng.integers(1, 6)))
    out = []
    for i in range(count):
        if i < heavy:
            rows = int(np.exp(rng.uniform(np.log(10e6), np.log(200e6))))
            dim = int(rng.choice((64, 128, 256)))
            pool = float(np.round(np.exp(rng.uniform(np.log(10.0), np.log(200.0))), 1))
        else:
            rows = int(np.exp(rng.uniform(np.log(100), np.log(5e6))))
            dim = int(rng.choice(DIMS, p=DIM_WEIGHTS))
            pool = float(np.clip(np.round(rng.lognormal(np.log(3.0), 1.2), 1), 1.0, 200.0))
        alpha = float(rng.uniform(0.9, 1.2))
        out.append(TableSpec(name=f"t{i}", rows=rows, dim=dim, dtype="fp32", pooling=PoolingSpec("skewed", pool),
                             access=AccessSpec("zipf", alpha)))
    return tuple(out)


def instance(seed: int, max_tables: int = 1000) -> Instance:
    """Instance number `seed` of the family (tables capped at `max_tables`)."""
    rng = np.random.default_rng([seed, 0xFA417])
    world = int(rng.choice(WORLDS))
    per_host = int(rng.choice([p for p in (4, 8) if 1 <= world // p <= 32]))
    count = int(min(max_tables, np.exp(rng.uniform(np.log(8), np.log(1000)))))
    tables = _tables(rng, max(1, count))
    batch = int(2 ** rng.integers(9, 17))
    mode = "inference" if rng.random() < 1 / 3 else "train"
    wl = PlanWorkload(tables, batch, mode)
    tight = bool(rng.random() < 0.25)
    if tight:  # tables take 60–140% of all ranks' usable HBM (after TorchRec's 15%)
        need = sum(t.rows * wl.row_bytes(t) for t in tables) / world
        hbm = need / (0.85 * rng.uniform(0.6, 1.4)) / 2**30
        hbm = float(np.clip(np.ceil(hbm * 4) / 4, 0.5, 80.0))
    else:
        hbm = float(rng.choice([16.0, 24.0, 32.0, 40.0, 80.0]))
    topo = load_topology("torchrec_default", world, per_host, hbm)
    return Instance(f"f{seed}", seed, wl, topo, tight)


def family(count: int, first: int = 0, max_tables: int = 1000) -> list[Instance]:
    """Instances `first` … `first + count − 1`."""
    return [instance(s, max_tables) for s in range(first, first + count)]
