"""The one typed config tree (Hydra structured configs). Each part receives only its own sub-config; a wrong key or
type fails at start with Hydra's message naming it."""
from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from embedding.cache.config import CacheConfig
from embedding.nmp.config import NmpConfig
from embedding.workload_config import WorkloadConfig

__all__ = ["BackendConfig", "PlacementConfig", "BenchConfig", "OutputConfig", "Config", "register_configs"]


@dataclass
class BackendConfig:
    names: list[str] = field(default_factory=lambda: ["torch", "fbgemm", "torchrec"])
    """lookup backends to run, one after another: torch | fbgemm | torchrec"""
    precision: str = "fp32"
    """fp32 | fp16 | int8 (fp16/int8 inference: fbgemm IntNBit TBE; fp16 also torch)"""
    learning_rate: float = 0.01


@dataclass
class PlacementConfig:
    name: str = "cpu"
    device: str = "cpu"
    """cpu | cuda"""
    host_largest: int = 0
    """hybrid: keep the N largest tables in host memory"""
    host_tables: list[str] = field(default_factory=list)
    """hybrid: keep these tables in host memory (e.g. the ones a plan names)"""


@dataclass
class BenchConfig:
    warmup: int = 3
    """untimed calls before timing, per backend"""
    repeats: int = 30
    """timed calls per backend (cycling over the workload's batches)"""
    ceilings: bool = True
    """also measure sequential-read and random-gather bandwidth in the same run"""
    ceiling_buffer_mib: int = 512
    overhead: bool = True
    """measure the harness's own cost against a bare loop calling the kernel"""
    model: bool = True
    """also time the full DLRM step (needs equal table dims)"""
    threads: int = 0
    """torch intra-op threads (0 = torch's default)"""
    max_memory_fraction: float = 0.6
    """refuse workloads whose tables need more than this share of the machine's memory (use workload.max_rows)"""


@dataclass
class OutputConfig:
    records: str = "results/records.jsonl"
    """JSONL file the run appends its records to (relative to the directory dlrmbench was started in)"""
    progress: bool = True
    resume: bool = True
    """multirun: skip jobs whose config (hashed without `output`) already has records; false forces a re-run"""


@dataclass
class Config:
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    """cache simulation or two-tier cached execution on the same batches (policy off = none)"""
    nmp: NmpConfig = field(default_factory=NmpConfig)
    """near-memory (RecNMP-style) emulation of the same batches (enabled false = none)"""


def register_configs() -> None:
    ConfigStore.instance().store(name="dlrmbench_schema", node=Config)
