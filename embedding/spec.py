"""What a workload is: tables, how many rows each bag looks up (pooling) and which rows (access).

Everything here is validated on construction, so a `WorkloadSpec` that exists is one that can be generated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["PoolingSpec", "AccessSpec", "TableSpec", "DenseArch", "WorkloadSpec", "SpecError", "DTYPE_BYTES",
           "ZIPF_ALPHA_MAX", "SEED_MAX"]

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "int4": 0.5}
POOLING_KINDS = ("fixed", "uniform", "skewed")
ACCESS_KINDS = ("uniform", "zipf", "trace")
MODES = ("inference", "train")
ZIPF_ALPHA_MAX = 100.0
"""largest Zipf alpha the generator takes: its tail fit holds to about 150, and at 100 the hottest row already
takes all but 2^-100 of the lookups"""
SEED_MAX = 2**63 - 1
"""seeds are non-negative 64-bit integers (numpy's SeedSequence refuses negative ones)"""


class SpecError(ValueError):
    """A workload, table or trace that cannot be built; the message names the offending field."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise SpecError(message)


@dataclass(frozen=True)
class PoolingSpec:
    """How many rows one bag (one sample of one table) looks up.

    fixed: every bag has `mean` rows.  uniform: integer in [low, high].  skewed: 1 + geometric, mean `mean`
    (long tail, as real multi-hot features); `high` > 0 caps it (the cap lowers the mean a little).
    """

    kind: str = "fixed"
    mean: float = 1.0
    low: int = 1
    high: int = 0

    def __post_init__(self) -> None:
        _require(self.kind in POOLING_KINDS, f"pooling.kind {self.kind!r} is not one of {POOLING_KINDS}")
        _require(math.isfinite(self.mean), f"pooling.mean must be a finite number, got {self.mean}")
        if self.kind == "fixed":
            _require(self.mean >= 1 and float(self.mean).is_integer(), f"fixed pooling needs an integer mean ≥ 1, got {self.mean}")
        elif self.kind == "uniform":
            _require(1 <= self.low <= self.high, f"uniform pooling needs 1 ≤ low ≤ high, got low={self.low} high={self.high}")
        else:
            _require(self.mean >= 1, f"skewed pooling needs mean ≥ 1, got {self.mean}")
            _require(self.high == 0 or self.high >= 1, f"skewed pooling cap high must be 0 (none) or ≥ 1, got {self.high}")

    @property
    def expected(self) -> float:
        """Expected rows per bag (before a skewed cap)."""
        return (self.low + self.high) / 2 if self.kind == "uniform" else float(self.mean)


@dataclass(frozen=True)
class AccessSpec:
    """Which rows a lookup touches. zipf: bounded Zipf(alpha) over the rows, hot ranks scattered by a seeded
    bijection of the row ids (so the hottest rows are not 0..k). trace: indices come from a trace file."""

    kind: str = "uniform"
    alpha: float = 1.05

    def __post_init__(self) -> None:
        _require(self.kind in ACCESS_KINDS, f"access.kind {self.kind!r} is not one of {ACCESS_KINDS}")
        if self.kind == "zipf":
            _require(0 < self.alpha <= ZIPF_ALPHA_MAX,
                     f"zipf alpha must be > 0 and ≤ {ZIPF_ALPHA_MAX:g}, got {self.alpha}")


@dataclass(frozen=True)
class TableSpec:
    name: str
    rows: int
    dim: int
    dtype: str = "fp32"
    pooling: PoolingSpec = field(default_factory=PoolingSpec)
    access: AccessSpec = field(default_factory=AccessSpec)

    def __post_init__(self) -> None:
        _require(bool(self.name), "a table needs a name")
        _require(isinstance(self.rows, int) and self.rows > 0, f"table {self.name!r}: rows must be a positive integer, got {self.rows}")
        _require(isinstance(self.dim, int) and self.dim > 0, f"table {self.name!r}: dim must be a positive integer, got {self.dim}")
        _require(self.dtype in DTYPE_BYTES, f"table {self.name!r}: dtype {self.dtype!r} is not one of {list(DTYPE_BYTES)}")

    @property
    def row_bytes(self) -> float:
        return self.dim * DTYPE_BYTES[self.dtype]

    @property
    def bytes(self) -> float:
        return self.rows * self.row_bytes


@dataclass(frozen=True)
class DenseArch:
    """Dense part of DLRM: bottom MLP over dense features (its last width is the embedding dim), dot
    interaction, top MLP ending in one logit."""

    num_dense_features: int = 13
    bottom_mlp: tuple[int, ...] = (512, 256, 64)
    top_mlp: tuple[int, ...] = (512, 256, 1)

    def __post_init__(self) -> None:
        _require(self.num_dense_features > 0, "dense.num_dense_features must be > 0")
        _require(len(self.bottom_mlp) > 0 and all(w > 0 for w in self.bottom_mlp), f"dense.bottom_mlp widths must be > 0: {self.bottom_mlp}")
        _require(len(self.top_mlp) > 0 and all(w > 0 for w in self.top_mlp), f"dense.top_mlp widths must be > 0: {self.top_mlp}")
        _require(self.top_mlp[-1] == 1, f"dense.top_mlp must end in 1 (the logit), got {self.top_mlp}")


@dataclass(frozen=True)
class WorkloadSpec:
    """A set of tables and the batches that look them up.

    `row_cap` > 0 records that rows were capped from `original_rows` to fit this machine (reported, never silent).
    `trace` names a dlrm_datasets-format file whose indices replace generated ones.
    """

    name: str
    tables: tuple[TableSpec, ...]
    batch_size: int
    num_batches: int = 4
    seed: int = 0
    mode: str = "inference"
    dense: DenseArch = field(default_factory=DenseArch)
    trace: str | None = None
    row_cap: int = 0
    original_rows: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _require(len(self.tables) > 0, f"workload {self.name!r} has no tables")
        _require(self.batch_size > 0, f"workload {self.name!r}: batch_size must be > 0, got {self.batch_size}")
        _require(self.num_batches > 0, f"workload {self.name!r}: num_batches must be > 0, got {self.num_batches}"
                 + (" (0 means 'all the trace holds' only with workload.trace)" if self.num_batches == 0 else ""))
        _require(0 <= self.seed <= SEED_MAX, f"workload {self.name!r}: seed must be in 0..2^63-1, got {self.seed}")
        _require(self.mode in MODES, f"workload {self.name!r}: mode {self.mode!r} is not one of {MODES}")
        names = [t.name for t in self.tables]
        _require(len(set(names)) == len(names), f"workload {self.name!r}: table names repeat")
        _require(self.row_cap >= 0, f"workload {self.name!r}: row_cap must be ≥ 0")
        _require(not self.original_rows or len(self.original_rows) == len(self.tables),
                 "original_rows must list one entry per table")

    @property
    def num_tables(self) -> int:
        return len(self.tables)

    @property
    def lookups_per_sample(self) -> float:
        return sum(t.pooling.expected for t in self.tables)

    @property
    def total_bytes(self) -> float:
        return sum(t.bytes for t in self.tables)

    @property
    def batch_bytes(self) -> float:
        """Bytes of one generated batch: indices (8 per lookup), lengths and offsets (8 each per bag), dense
        features and labels (4 bytes each)."""
        bags = self.num_tables * self.batch_size
        return self.batch_size * (self.lookups_per_sample * 8 + self.dense.num_dense_features * 4 + 4) + bags * 16

    @property
    def capped_tables(self) -> list[str]:
        if not self.original_rows:
            return []
        return [t.name for t, r in zip(self.tables, self.original_rows, strict=True) if t.rows < r]
