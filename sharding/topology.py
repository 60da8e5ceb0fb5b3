"""The hardware a plan targets: ranks grouped in hosts, each rank with memory tiers, links between ranks.

Every constant carries a `source` note (measured here, vendor sheet, or TorchRec's default) so a plan's cost can
be traced to where its numbers came from. Presets live in `conf/hardware/*.yaml`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

__all__ = ["MemoryTier", "Link", "Topology", "TopologyError", "load_topology", "hardware_presets", "HARDWARE_DIR"]

HARDWARE_DIR = Path(__file__).resolve().parent.parent / "conf" / "hardware"
DEVICES = ("cuda", "cpu")


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

    `reserved_fraction` of tier 0 is kept for the dense model and activations (TorchRec reserves 15%).
    `bwd_compute_multiplier`: backward lookup+update time as a multiple of forward (TorchRec's empirical 2.0).
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
    sources: dict[str, str] = field(default_factory=dict, compare=False)

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
        """Bytes per rank a plan may fill in a tier (tier 0 minus the reservation)."""
        t = self.tier(tier_name)
        return t.capacity * (1 - self.reserved_fraction) if t is self.tiers[0] else t.capacity

    def host_of(self, rank: int) -> int:
        return rank // self.ranks_per_host

    def collective_link(self, ranks_span_hosts: bool) -> Link:
        """The bottleneck link of a collective: inter-host once it crosses hosts."""
        return self.inter_host if ranks_span_hosts else self.intra_host

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
            "bwd_compute_multiplier": self.bwd_compute_multiplier,
            "tiers": [{"name": t.name, "capacity": t.capacity, "bandwidth": t.bandwidth, "source": t.source}
                      for t in self.tiers],
            "intra_host": {"bandwidth": self.intra_host.bandwidth, "latency": self.intra_host.latency,
                           "source": self.intra_host.source},
            "inter_host": {"bandwidth": self.inter_host.bandwidth, "latency": self.inter_host.latency,
                           "source": self.inter_host.source},
            "sources": dict(self.sources),
        }

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
                bwd_compute_multiplier=float(d.get("bwd_compute_multiplier", 2.0)),
                sources={str(k): str(v) for k, v in (d.get("sources") or {}).items()},
            )
        except KeyError as e:
            raise TopologyError(f"hardware config lacks field {e.args[0]!r}") from None


def hardware_presets() -> list[str]:
    """Names of the presets in conf/hardware/."""
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml"))


def load_topology(name_or_path: str | Path, ranks: int | None = None) -> Topology:
    """A preset name from conf/hardware/ or a YAML path; `ranks` resizes it (see `Topology.with_ranks`)."""
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
    return topo.with_ranks(ranks) if ranks else topo
