"""The hardware a plan targets: ranks grouped in hosts, each rank with memory tiers, links between ranks.

Every constant carries a `source` note (measured here, vendor sheet, or TorchRec's default) so a plan's cost can
be traced to where its numbers came from. Presets live in `conf/hardware/*.yaml`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

__all__ = ["MemoryTier", "Link", "Topology", "TopologyError", "load_topology", "hardware_presets", "HARDWARE_DIR",
           "COLLECTIVE_OPS", "STAGES", "OVERHEAD_GROUPS"]

HARDWARE_DIR = Path(__file__).resolve().parent.parent / "conf" / "hardware"
DEVICES = ("cuda", "cpu")
COLLECTIVE_OPS = ("all_to_all", "reduce_scatter", "all_gather", "all_reduce")
# execution stages of a sharded step, as benchmarks.distributed.stages times them
STAGES = ("input_dist", "lookup", "output_dist", "output_dist_bwd", "lookup_bwd", "optimizer")
OVERHEAD_GROUPS = ("base", "TW", "RW", "CW", "TWRW", "DP")
INDEX_BYTES = 8  # an id in a batch's input (TorchRec's BIGINT_DTYPE)


class TopologyError(ValueError):
    """A topology that cannot host a plan (no ranks, a non-positive capacity or bandwidth, unknown preset)."""


@dataclass(frozen=True)
class MemoryTier:
    """One memory level of a rank. `bandwidth` is the effective rate (bytes/s) at which an embedding kernel on
    this rank gathers random rows from the tier (for DDR seen from a GPU: PCIe/UVM, not the DIMMs' peak)."""

    name: str
    capacity: float  # bytes per rank
    bandwidth: float  # bytes/s, random-row gather as seen by the rank's kernel
    source: str = ""

    def __post_init__(self) -> None:
        if self.capacity < 0 or self.bandwidth <= 0:
            raise TopologyError(f"tier {self.name!r}: capacity must be ≥ 0 and bandwidth > 0, "
                                f"got capacity={self.capacity} bandwidth={self.bandwidth}")


@dataclass(frozen=True)
class Link:
    """Per-rank bandwidth (bytes/s, one direction) and per-message latency (s) of a class of link."""

    bandwidth: float
    latency: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        if self.bandwidth <= 0 or self.latency < 0:
            raise TopologyError(f"link needs bandwidth > 0 and latency ≥ 0, got {self.bandwidth}, {self.latency}")


@dataclass(frozen=True)
class Topology:
    """`num_hosts` × `ranks_per_host` identical ranks. `tiers` run fastest first: tier 0 is the rank's own
    memory (HBM on a GPU, DDR on a CPU rank) and also holds caches and input/output buffers.

    `reserved_fraction` of tier 0 is kept for the dense model and activations (TorchRec reserves 15%), and
    `reserved_bytes` more per rank. `input_copies`: copies of a batch's ids (8 bytes each) also kept in tier 0, as
    TorchRec's default planner reserves (`HeuristicalStorageReservation`: 2 pipelined batches × 10 copies = 20);
    they depend on the workload, so `reserve_inputs` turns them into `reserved_bytes` (the optimizer, the
    baselines and `validate_plan` call it; 0: none).
    `bwd_compute_multiplier`: backward lookup+update time as a multiple of forward (TorchRec's empirical 2.0).
    `collectives`: per collective op (`COLLECTIVE_OPS`) a fitted `Link` (time of one call = latency + bytes /
    bandwidth); an op not listed uses `intra_host` / `inter_host`.
    `stage_overhead`: fixed seconds per step of each execution stage (`STAGES`) for one sharding group of a type
    ("TW", "RW", "CW", "TWRW", "DP"), plus "base" (once per step, whatever the groups): the framework's per-call
    cost (Python, kernel launch, collective latency) measured with ≈ 0 bytes. Empty (the GPU presets): each
    collective call costs its link latency and kernels are free of fixed cost.
    `stage_bandwidth`: per sharding type and stage, bytes/s of the byte-proportional part of that TorchRec stage
    (fitted from a tiny and a larger plan of the type): it replaces tier 0's bandwidth (lookup, lookup_bwd), the
    op's bandwidth (input_dist, output_dist, output_dist_bwd; DP lookup_bwd: the gradient all-reduce) and
    `optimizer_bandwidth` (DP optimizer) for that type's bytes. Missing entries use those figures.
    `optimizer_bandwidth`: bytes/s of a dense optimizer step over replicated (DP) tables (0: tier 0 bandwidth).
    `step_overhead`: seconds per step outside the embedding stages (loss, the dense part's backward, zero_grad,
    the framework between stages), calibrated as a tiny plan's step time − the sum of its stages (0: unmeasured).
    `step_overhead_per_value`: seconds that step adds per pooled embedding value a rank's batch yields in
    training (batch × Σ table dims: the loss over them, its backward, the dense gradients), calibrated from
    larger stage plans' outside time over the tiny plans' (0: unmeasured or not priced; `CostModel.outside`).
    `llc_bytes` and `lookup_weights` (CPU ranks, from `dlrmbench calibrate`'s lookup grid): the host's last-level
    cache, and per lookup stage ("lookup", "lookup_bwd") what the kernel's time is made of besides bytes, in
    bytes of the same time: "id_bytes" per id looked up (the per-row cost a gather pays whatever its width) and
    "dram", the extra cost of a row byte that misses the LLC per byte served near the core (the miss as a hot set
    of the table's share of the LLC would leave: `CostModel.llc_miss`); "lookup_bwd" may hold "unique_rows", the
    share (0–1) of the backward's row bytes that the fused row-wise update pays once per distinct row touched
    rather than per id (`CostModel.unique_share`). Empty (the GPU presets): bytes only.
    """

    name: str
    device: str
    num_hosts: int
    ranks_per_host: int
    tiers: tuple[MemoryTier, ...]
    intra_host: Link
    inter_host: Link
    reserved_fraction: float = 0.15
    bwd_compute_multiplier: float = 2.0
    reserved_bytes: float = 0.0
    input_copies: int = 0
    collectives: dict[str, Link] = field(default_factory=dict)
    stage_overhead: dict[str, dict[str, float]] = field(default_factory=dict)
    optimizer_bandwidth: float = 0.0
    stage_bandwidth: dict[str, dict[str, float]] = field(default_factory=dict)
    step_overhead: float = 0.0
    step_overhead_per_value: float = 0.0
    llc_bytes: float = 0.0
    lookup_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def __hash__(self) -> int:
        return hash((self.name, self.device, self.num_hosts, self.ranks_per_host, self.tiers))

    def __post_init__(self) -> None:
        if self.num_hosts < 1 or self.ranks_per_host < 1:
            raise TopologyError(f"topology {self.name!r} has no ranks: num_hosts={self.num_hosts}, "
                                f"ranks_per_host={self.ranks_per_host}")
        if self.device not in DEVICES:
            raise TopologyError(f"topology {self.name!r}: device {self.device!r} is not one of {DEVICES}")
        if not self.tiers:
            raise TopologyError(f"topology {self.name!r} has no memory tiers")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise TopologyError(f"topology {self.name!r}: tier names repeat: {names}")
        if not 0 <= self.reserved_fraction < 1:
            raise TopologyError(f"topology {self.name!r}: reserved_fraction must be in [0, 1)")
        if self.reserved_bytes < 0 or self.input_copies < 0:
            raise TopologyError(f"topology {self.name!r}: reserved_bytes and input_copies must be ≥ 0")
        bad_ops = sorted(set(self.collectives) - set(COLLECTIVE_OPS))
        per_stage = (self.stage_overhead, self.stage_bandwidth)
        bad_groups = sorted({g for d in per_stage for g in d} - set(OVERHEAD_GROUPS))
        bad_stages = sorted({s for d in per_stage for v in d.values() for s in v} - set(STAGES))
        if bad_ops or bad_groups or bad_stages:
            raise TopologyError(f"topology {self.name!r}: unknown collective ops {bad_ops}, overhead groups "
                                f"{bad_groups} or stages {bad_stages} (known: {COLLECTIVE_OPS}, "
                                f"{OVERHEAD_GROUPS}, {STAGES})")
        if min(self.optimizer_bandwidth, self.step_overhead, self.step_overhead_per_value) < 0 or any(
                v < 0 for g in self.stage_overhead.values() for v in g.values()):
            raise TopologyError(f"topology {self.name!r}: optimizer_bandwidth, step_overhead(_per_value) and "
                                "stage overheads must be ≥ 0")
        if any(v <= 0 for g in self.stage_bandwidth.values() for v in g.values()):
            raise TopologyError(f"topology {self.name!r}: stage bandwidths must be > 0")
        lw = self.lookup_weights
        if self.llc_bytes < 0 or set(lw) - {"lookup", "lookup_bwd"} or any(
                set(v) - {"id_bytes", "dram", "unique_rows", "row_bytes"} or min(v.values(), default=0) < 0
                or v.get("unique_rows", 0.0) > 1 for v in lw.values()):
            raise TopologyError(f"topology {self.name!r}: llc_bytes must be ≥ 0 and lookup_weights map 'lookup' / "
                                f"'lookup_bwd' to {{id_bytes, dram}} ≥ 0 and unique_rows in [0, 1], got "
                                f"{self.llc_bytes}, {lw}")

    @property
    def world_size(self) -> int:
        return self.num_hosts * self.ranks_per_host

    @property
    def fast(self) -> MemoryTier:
        return self.tiers[0]

    def tier(self, name: str) -> MemoryTier:
        for t in self.tiers:
            if t.name == name:
                return t
        raise TopologyError(f"topology {self.name!r} has no tier {name!r} (tiers: {[t.name for t in self.tiers]})")

    def tier_index(self, name: str) -> int:
        return [t.name for t in self.tiers].index(self.tier(name).name)

    def usable(self, tier_name: str) -> float:
        """Bytes per rank a plan may fill in a tier (tier 0 minus the reservation; as TorchRec's
        `_reserve_storage_percentage`, the fraction's remainder is rounded down to whole bytes)."""
        t = self.tier(tier_name)
        if t is not self.tiers[0]:
            return t.capacity
        return max(0.0, math.floor(t.capacity * (1 - self.reserved_fraction)) - self.reserved_bytes)

    def reserve_inputs(self, ids_per_batch: float) -> Topology:
        """This topology with `input_copies` of a batch's `ids_per_batch` ids (8 bytes each) reserved in tier 0
        (TorchRec: ceil(Σ pooling × batch × 8) × 20 bytes); the same topology when nothing is left to reserve."""
        if not self.input_copies:
            return self
        return replace(self, input_copies=0,
                       reserved_bytes=self.reserved_bytes + math.ceil(ids_per_batch * INDEX_BYTES) * self.input_copies)

    def host_of(self, rank: int) -> int:
        return rank // self.ranks_per_host

    def collective_link(self, ranks_span_hosts: bool) -> Link:
        """The bottleneck link of a collective: inter-host once it crosses hosts."""
        return self.inter_host if ranks_span_hosts else self.intra_host

    def collective(self, op: str, ranks_span_hosts: bool) -> Link:
        """Latency and bandwidth of one call of `op`: the fitted one within a host, else the link's."""
        if not ranks_span_hosts and op in self.collectives:
            return self.collectives[op]
        return self.collective_link(ranks_span_hosts)

    @property
    def all_to_all_by_mean(self) -> bool:
        """Whether an all-to-all costs its ranks' mean bytes rather than its busiest rank's (`CostModel.
        collective_price`): on CPU ranks (gloo within a host) the call is memory copies by the host's cores, and
        a one-sided exchange (one rank receives all) measured as fast as a balanced one of the same total bytes
        (results/validation/i19r_a2a_skew_20261203.md); GPU ranks keep the busiest rank's (each has its own link)."""
        return self.device == "cpu"

    @property
    def dense_update_bandwidth(self) -> float:
        return self.optimizer_bandwidth or self.fast.bandwidth

    def stage_bw(self, group: str, stage: str, default: float) -> float:
        """Fitted bytes/s of a stage's byte-proportional part for a sharding type, else `default`."""
        return self.stage_bandwidth.get(group, {}).get(stage, default)

    def with_ranks(self, ranks: int) -> Topology:
        """Same hardware with `ranks` ranks: fewer than a host shrinks the host, more adds whole hosts."""
        if ranks < 1:
            raise TopologyError(f"topology {self.name!r}: ranks must be ≥ 1, got {ranks}")
        if ranks <= self.ranks_per_host:
            return replace(self, num_hosts=1, ranks_per_host=ranks)
        if ranks % self.ranks_per_host:
            raise TopologyError(f"topology {self.name!r}: {ranks} ranks is not a multiple of "
                                f"{self.ranks_per_host} ranks per host")
        return replace(self, num_hosts=ranks // self.ranks_per_host)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "device": self.device, "num_hosts": self.num_hosts,
            "ranks_per_host": self.ranks_per_host, "reserved_fraction": self.reserved_fraction,
            "reserved_bytes": self.reserved_bytes, "input_copies": self.input_copies,
            "bwd_compute_multiplier": self.bwd_compute_multiplier,
            "tiers": [{"name": t.name, "capacity": t.capacity, "bandwidth": t.bandwidth, "source": t.source}
                      for t in self.tiers],
            "intra_host": {"bandwidth": self.intra_host.bandwidth, "latency": self.intra_host.latency,
                           "source": self.intra_host.source},
            "inter_host": {"bandwidth": self.inter_host.bandwidth, "latency": self.inter_host.latency,
                           "source": self.inter_host.source},
            "collectives": {k: {"bandwidth": v.bandwidth, "latency": v.latency, "source": v.source}
                            for k, v in self.collectives.items()},
            "stage_overhead": {k: dict(v) for k, v in self.stage_overhead.items()},
            "optimizer_bandwidth": self.optimizer_bandwidth,
            "stage_bandwidth": {k: dict(v) for k, v in self.stage_bandwidth.items()},
            "step_overhead": self.step_overhead, "step_overhead_per_value": self.step_overhead_per_value,
            "llc_bytes": self.llc_bytes, "lookup_weights": {k: dict(v) for k, v in self.lookup_weights.items()},
            "sources": dict(self.sources),
        }

    @classmethod
    def from_torchrec(cls, topology: Any, name: str = "torchrec", reserved_fraction: float = 0.15,
                      input_copies: int = 20) -> Topology:
        """The hardware a TorchRec `Topology` describes, as TorchRec's planner sees it: per-rank HBM and DDR
        capacities, HBM bandwidth (fused kernels), HBM-to-DDR bandwidth (UVM kernels; TorchRec divides it by 10
        itself), intra- and inter-host bandwidth, backward multiplier, ranks per host (`local_world_size`). TorchRec
        models no link latency, so the links have none. The reservation defaults to what `EmbeddingShardingPlanner`
        applies when given none (`HeuristicalStorageReservation(0.15)`: 15% of HBM, then 20 copies of a batch's
        ids; the dense-parameter part is 0 for a model of embedding tables alone)."""
        ms = 1e3  # TorchRec's bandwidths are bytes/ms
        world, local = int(topology.world_size), int(topology.local_world_size)
        if world % local:
            raise TopologyError(f"TorchRec topology: world_size {world} is not a multiple of local_world_size {local}")
        caps = {(d.storage.hbm, d.storage.ddr) for d in topology.devices}
        if len(caps) != 1:
            raise TopologyError(f"TorchRec topology: ranks differ in capacity {sorted(caps)[:3]} (ours are identical)")
        hbm, ddr = caps.pop()
        device = str(topology.compute_device)
        src = "TorchRec Topology"
        if device == "cuda":
            tiers = (MemoryTier("hbm", float(hbm), topology.hbm_mem_bw * ms, f"{src}: hbm_cap, hbm_mem_bw"),
                     MemoryTier("ddr", float(ddr), topology.hbm_to_ddr_mem_bw * ms, f"{src}: ddr_cap, hbm_to_ddr_mem_bw"))
        elif device == "cpu":
            tiers = (MemoryTier("ddr", float(ddr), topology.ddr_mem_bw * ms, f"{src}: ddr_cap, ddr_mem_bw"),)
        else:
            raise TopologyError(f"TorchRec topology: compute_device {device!r} is not one of {DEVICES}")
        return cls(name=name, device=device, num_hosts=world // local, ranks_per_host=local, tiers=tiers,
                   intra_host=Link(topology.intra_host_bw * ms, 0.0, f"{src}: intra_host_bw, no latency"),
                   inter_host=Link(topology.inter_host_bw * ms, 0.0, f"{src}: inter_host_bw, no latency"),
                   reserved_fraction=reserved_fraction, input_copies=input_copies,
                   bwd_compute_multiplier=float(topology.bwd_compute_multiplier),
                   sources={"reserved_fraction": "TorchRec HeuristicalStorageReservation percentage (planner default)",
                            "input_copies": "TorchRec HeuristicalStorageReservation KJT multiplier 20"})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Topology:
        try:
            return cls(
                name=str(d.get("name", "custom")), device=str(d["device"]), num_hosts=int(d["num_hosts"]),
                ranks_per_host=int(d["ranks_per_host"]),
                tiers=tuple(MemoryTier(str(t["name"]), float(t["capacity"]), float(t["bandwidth"]),
                                       str(t.get("source", ""))) for t in d["tiers"]),
                intra_host=Link(float(d["intra_host"]["bandwidth"]), float(d["intra_host"].get("latency", 0)),
                                str(d["intra_host"].get("source", ""))),
                inter_host=Link(float(d["inter_host"]["bandwidth"]), float(d["inter_host"].get("latency", 0)),
                                str(d["inter_host"].get("source", ""))),
                reserved_fraction=float(d.get("reserved_fraction", 0.15)),
                reserved_bytes=float(d.get("reserved_bytes", 0.0)), input_copies=int(d.get("input_copies", 0)),
                bwd_compute_multiplier=float(d.get("bwd_compute_multiplier", 2.0)),
                collectives={str(k): Link(float(v["bandwidth"]), float(v.get("latency", 0)),
                                          str(v.get("source", ""))) for k, v in (d.get("collectives") or {}).items()},
                stage_overhead={str(k): {str(s): float(x) for s, x in (v or {}).items()}
                                for k, v in (d.get("stage_overhead") or {}).items()},
                optimizer_bandwidth=float(d.get("optimizer_bandwidth", 0.0)),
                stage_bandwidth={str(k): {str(s): float(x) for s, x in (v or {}).items()}
                                 for k, v in (d.get("stage_bandwidth") or {}).items()},
                step_overhead=float(d.get("step_overhead", 0.0)),
                step_overhead_per_value=float(d.get("step_overhead_per_value", 0.0)),
                llc_bytes=float(d.get("llc_bytes", 0.0)),
                lookup_weights={str(k): {str(s): float(x) for s, x in (v or {}).items()}
                                for k, v in (d.get("lookup_weights") or {}).items()},
                sources={str(k): str(v) for k, v in (d.get("sources") or {}).items()},
            )
        except KeyError as e:
            raise TopologyError(f"hardware config lacks field {e.args[0]!r}") from None


def hardware_presets() -> list[str]:
    """Names of the presets in conf/hardware/."""
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml"))


def load_topology(name_or_path: str | Path, ranks: int | None = None, ranks_per_host: int | None = None,
                  hbm_gib: float | None = None) -> Topology:
    """A preset name from conf/hardware/ or a YAML path; `ranks_per_host` regroups its ranks into hosts of that
    many, `ranks` then resizes it (see `Topology.with_ranks`), `hbm_gib` sets its HBM tier's capacity per rank
    (GiB, as TorchRec writes `hbm_cap`)."""
    path = Path(name_or_path)
    if not path.suffix:
        path = HARDWARE_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise TopologyError(f"no hardware config {str(name_or_path)!r} (presets: {hardware_presets()})")
    with open(path) as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise TopologyError(f"hardware config {path} is not a mapping")
    topo = Topology.from_dict(data)
    if ranks_per_host is not None:
        if ranks_per_host < 1:
            raise TopologyError(f"ranks per host must be ≥ 1, got {ranks_per_host}")
        topo = replace(topo, ranks_per_host=ranks_per_host)
    if ranks is not None:
        topo = topo.with_ranks(ranks)
    if hbm_gib is not None:
        if topo.fast.name != "hbm" or not hbm_gib > 0:
            raise TopologyError(f"HBM {hbm_gib} GiB: needs a preset whose first tier is hbm (this one: "
                                f"{topo.fast.name}) and a capacity > 0")
        topo = replace(topo, tiers=(replace(topo.fast, capacity=hbm_gib * 2**30,
                                            source=f"set to {hbm_gib:g} GiB per rank"), *topo.tiers[1:]))
    return topo
