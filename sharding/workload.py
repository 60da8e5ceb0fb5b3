"""What the planner needs to know about a workload: the tables, the per-rank batch, train or inference."""
from __future__ import annotations

from dataclasses import dataclass

from embedding.spec import DTYPE_BYTES, TableSpec, WorkloadSpec

__all__ = ["PlanWorkload", "OPTIMIZER_STATE_BYTES", "PlanError"]

# Optimizer state per weight element, as a function of (dim, dtype bytes) -> bytes per row.
OPTIMIZER_STATE_BYTES = {
    "sgd": lambda dim, wb: 0.0,
    "rowwise_adagrad": lambda dim, wb: 4.0,  # one fp32 accumulator per row (FBGEMM EXACT_ROW_WISE_ADAGRAD)
    "adagrad": lambda dim, wb: dim * wb,
    "adam": lambda dim, wb: 2 * dim * wb,
}


class PlanError(ValueError):
    """A plan, workload or topology that cannot work; the message names the table and the shortfall."""


@dataclass(frozen=True)
class PlanWorkload:
    """Tables plus the batch each rank feeds (TorchRec's planner `batch_size` convention: the global batch is
    `batch_size × world_size`). `mode` "train" adds backward, gradient comms and optimizer state."""

    tables: tuple[TableSpec, ...]
    batch_size: int
    mode: str = "train"
    optimizer: str = "rowwise_adagrad"
    output_bytes: int = 4  # pooled embedding / gradient element (fp32)
    index_bytes: int = 8  # int64 ids, as TBE converts them

    def __post_init__(self) -> None:
        if not self.tables:
            raise PlanError("workload has no tables")
        if self.batch_size < 1:
            raise PlanError(f"batch_size must be ≥ 1, got {self.batch_size}")
        if self.mode not in ("train", "inference"):
            raise PlanError(f"mode {self.mode!r} is not 'train' or 'inference'")
        if self.optimizer not in OPTIMIZER_STATE_BYTES:
            raise PlanError(f"optimizer {self.optimizer!r} is not one of {list(OPTIMIZER_STATE_BYTES)}")
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise PlanError(f"table names repeat: {dup[:5]}")

    @classmethod
    def from_spec(cls, spec: WorkloadSpec, optimizer: str = "rowwise_adagrad") -> PlanWorkload:
        return cls(tables=spec.tables, batch_size=spec.batch_size, mode=spec.mode, optimizer=optimizer)

    @property
    def train(self) -> bool:
        return self.mode == "train"

    @property
    def ids_per_batch(self) -> float:
        """Expected ids one rank's batch feeds (Σ pooling × batch): what TorchRec's input reservation counts."""
        return self.batch_size * sum(t.pooling.expected for t in self.tables)

    def table(self, name: str) -> TableSpec:
        for t in self.tables:
            if t.name == name:
                return t
        raise PlanError(f"workload has no table {name!r}")

    def row_bytes(self, t: TableSpec, cols: int | None = None) -> float:
        """Stored bytes per row of `cols` columns: weights plus optimizer state when training."""
        cols = t.dim if cols is None else cols
        wb = DTYPE_BYTES[t.dtype]
        opt = OPTIMIZER_STATE_BYTES[self.optimizer](cols, wb) if self.train else 0.0
        return cols * wb + opt
