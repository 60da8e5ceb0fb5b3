"""The `workload` config group's schema (Hydra structured config) and its translation into a `WorkloadSpec`.

Tables come from, in order: `rows` (one table per entry, sharing `dim`, `pooling`, `access`; `pooling_sizes` gives
per-table multi-hot sizes), `tables` (explicit entries), `table_list` (a CSV/YAML file), `random_tables`
(dlrm_datasets-shaped), or `trace` (a dlrm_datasets file; its tables and indices). `max_rows` > 0 caps every table's
rows: the scale knob that lets production-sized presets run on a small machine; capped tables are reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .spec import AccessSpec, DenseArch, PoolingSpec, SpecError, TableSpec, WorkloadSpec
from .synthetic import random_tables
from .tablelist import load_table_list
from .traces import workload_from_trace

__all__ = ["PoolingConfig", "AccessConfig", "TableConfig", "RandomTablesConfig", "DenseConfig", "WorkloadConfig",
           "build_workload"]


@dataclass
class PoolingConfig:
    kind: str = "fixed"
    """fixed | uniform | skewed (1 + geometric with mean `mean`)"""
    mean: float = 1.0
    low: int = 1
    high: int = 0
    """uniform: upper bound; skewed: cap (0 = none)"""


@dataclass
class AccessConfig:
    kind: str = "uniform"
    """uniform | zipf"""
    alpha: float = 1.05


@dataclass
class TableConfig:
    name: str = "table"
    rows: int = 1000
    dim: int = 64
    pooling: PoolingConfig = field(default_factory=PoolingConfig)
    access: AccessConfig | None = None
    """None = the workload's `access`"""


@dataclass
class RandomTablesConfig:
    count: int = 0
    """0 = none; else this many dlrm_datasets-shaped random tables"""
    seed: int = 0
    rows_min: int = 100
    rows_max: int = 40_000_000
    dims: list[int] = field(default_factory=lambda: [16, 32, 64, 128])
    alpha_min: float = 0.9
    alpha_max: float = 1.2


@dataclass
class DenseConfig:
    num_dense_features: int = 13
    bottom_mlp: list[int] = field(default_factory=lambda: [512, 256, 64])
    """last width must equal the embedding dim for the dot interaction"""
    top_mlp: list[int] = field(default_factory=lambda: [512, 256, 1])


@dataclass
class WorkloadConfig:
    name: str = "smoke"
    batch_size: int = 512
    num_batches: int = 4
    seed: int = 0
    mode: str = "inference"
    """inference | train"""
    dtype: str = "fp32"
    dim: int = 64
    rows: list[int] = field(default_factory=list)
    pooling_sizes: list[float] = field(default_factory=list)
    """per-table multi-hot sizes for `rows` tables (empty = `pooling` for all)"""
    pooling: PoolingConfig = field(default_factory=PoolingConfig)
    access: AccessConfig = field(default_factory=AccessConfig)
    tables: list[TableConfig] = field(default_factory=list)
    table_list: str | None = None
    random_tables: RandomTablesConfig = field(default_factory=RandomTablesConfig)
    trace: str | None = None
    max_rows: int = 0
    """scale knob: cap each table's rows (0 = full size); capped tables are reported in every record"""
    dense: DenseConfig = field(default_factory=DenseConfig)


def _pooling(cfg, where: str) -> PoolingSpec:
    try:
        return PoolingSpec(cfg.kind, float(cfg.mean), int(cfg.low), int(cfg.high))
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None


def _access(cfg, where: str) -> AccessSpec:
    try:
        return AccessSpec(cfg.kind, float(cfg.alpha))
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None


def build_workload(cfg: WorkloadConfig) -> WorkloadSpec:
    """Validate the config and build the workload; raises SpecError naming the offending field."""
    dense = DenseArch(cfg.dense.num_dense_features, tuple(cfg.dense.bottom_mlp), tuple(cfg.dense.top_mlp))
    if cfg.trace:
        others = [k for k, v in (("rows", cfg.rows), ("tables", cfg.tables), ("random_tables.count",
                                                                           cfg.random_tables.count)) if v]
        if others:
            raise SpecError(f"workload {cfg.name!r}: workload.trace brings its own tables, so workload."
                            f"{others[0]} must be empty (start from workload=trace, or give the tables' shapes "
                            "with workload.table_list)")
        if cfg.max_rows:
            raise SpecError(f"workload {cfg.name!r}: max_rows cannot cap a trace's tables (its indices would fall "
                            "outside them); set workload.max_rows=0")
        listed = load_table_list(cfg.table_list, cfg.dtype) if cfg.table_list else None
        spec = workload_from_trace(cfg.trace, cfg.batch_size, cfg.num_batches, cfg.dim, cfg.seed, cfg.mode,
                                   name=cfg.name, tables=listed)
        return replace(spec, dense=dense)
    access = _access(cfg.access, f"workload {cfg.name!r} access")
    tables: list[TableSpec] = []
    if cfg.pooling_sizes and len(cfg.pooling_sizes) != len(cfg.rows):
        raise SpecError(f"workload {cfg.name!r}: {len(cfg.pooling_sizes)} pooling_sizes for {len(cfg.rows)} rows")
    for i, rows in enumerate(cfg.rows):
        pooling = (PoolingSpec("fixed", float(cfg.pooling_sizes[i])) if cfg.pooling_sizes
                   else _pooling(cfg.pooling, f"workload {cfg.name!r} pooling"))
        tables.append(TableSpec(f"t{i}", int(rows), cfg.dim, cfg.dtype, pooling, access))
    for t in cfg.tables:
        where = f"workload {cfg.name!r} table {t.name!r}"
        tables.append(TableSpec(t.name, int(t.rows), int(t.dim), cfg.dtype, _pooling(t.pooling, where),
                                _access(t.access, where) if t.access is not None else access))
    if cfg.table_list:
        tables.extend(load_table_list(cfg.table_list, cfg.dtype))
    r = cfg.random_tables
    if r.count:
        tables.extend(random_tables(r.count, r.seed, r.rows_min, r.rows_max, tuple(r.dims), r.alpha_min,
                                    r.alpha_max, cfg.dtype))
    if not tables:
        raise SpecError(f"workload {cfg.name!r} has no tables: set rows, tables, table_list, random_tables or trace")
    original = tuple(t.rows for t in tables)
    if cfg.max_rows < 0:
        raise SpecError(f"workload {cfg.name!r}: max_rows must be ≥ 0, got {cfg.max_rows}")
    if cfg.max_rows:
        tables = [replace(t, rows=min(t.rows, cfg.max_rows)) for t in tables]
    return WorkloadSpec(name=cfg.name, tables=tuple(tables), batch_size=cfg.batch_size, num_batches=cfg.num_batches,
                        seed=cfg.seed, mode=cfg.mode, dense=dense, row_cap=cfg.max_rows,
                        original_rows=original if cfg.max_rows else ())
