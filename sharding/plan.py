"""A sharding plan: for each table its sharding type and shards (rank, row and column range, memory placement).

Vocabulary follows TorchRec (`ShardingType` values are TorchRec's strings) so plans convert both ways. A plan is
plain data; `sharding.validate.validate_plan` checks it against tables and a topology.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from embedding.files import umask_mode
from sharding.workload import PlanError

__all__ = ["ShardingType", "Shard", "TablePlan", "ShardingPlan", "PLAN_FORMAT"]

PLAN_FORMAT = "dlrmbench.sharding_plan/1"


class ShardingType(str, Enum):
    TABLE_WISE = "table_wise"
    ROW_WISE = "row_wise"
    COLUMN_WISE = "column_wise"
    TABLE_ROW_WISE = "table_row_wise"
    DATA_PARALLEL = "data_parallel"

    @property
    def short(self) -> str:
        return _SHORT[self]  # a constant table: the cost models read this ~10^5 times per `optimize`


_SHORT = {ShardingType.TABLE_WISE: "TW", ShardingType.ROW_WISE: "RW", ShardingType.COLUMN_WISE: "CW",
          ShardingType.TABLE_ROW_WISE: "TWRW", ShardingType.DATA_PARALLEL: "DP"}


@dataclass(frozen=True)
class Shard:
    """Rows [row_start, row_end) × columns [col_start, col_end) of a table on `rank`, stored in memory tier
    `tier`; `cache_fraction` > 0 (only for a tier below the rank's fastest) keeps that share of the shard's rows
    cached in the fastest tier (UVM caching)."""

    rank: int
    row_start: int
    row_end: int
    col_start: int
    col_end: int
    tier: str
    cache_fraction: float = 0.0

    @classmethod
    def fast(cls, rank: int, row_start: int, row_end: int, col_start: int, col_end: int, tier: str,
             cache_fraction: float = 0.0) -> Shard:
        """`Shard(...)` without the frozen dataclass's per-field `__init__` (the optimizer builds plans of 10^5
        row-wise shards; this takes a third of the time)."""
        s = object.__new__(cls)
        object.__setattr__(s, "__dict__", {"rank": rank, "row_start": row_start, "row_end": row_end,
                                           "col_start": col_start, "col_end": col_end, "tier": tier,
                                           "cache_fraction": cache_fraction})
        return s

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start

    @property
    def cols(self) -> int:
        return self.col_end - self.col_start

    def to_list(self) -> list[Any]:
        return [self.rank, self.row_start, self.row_end, self.col_start, self.col_end, self.tier,
                self.cache_fraction]

    @classmethod
    def from_list(cls, x: list[Any], table: str) -> Shard:
        if not isinstance(x, list) or len(x) != 7:
            raise PlanError(f"table {table!r}: a shard must be [rank, row_start, row_end, col_start, col_end, "
                            f"tier, cache_fraction], got {x!r}")
        try:
            return cls(int(x[0]), int(x[1]), int(x[2]), int(x[3]), int(x[4]), str(x[5]), float(x[6]))
        except (TypeError, ValueError, OverflowError):
            raise PlanError(f"table {table!r}: shard {x!r} has a field of the wrong type") from None


@dataclass(frozen=True)
class TablePlan:
    name: str
    sharding_type: ShardingType
    shards: tuple[Shard, ...]

    def __getattr__(self, name: str) -> Any:
        """`shards` of a plan from `layouts.table_plan` are made on first use: the optimizer rates its packings
        by `alike` alone and reads the shards of the one it returns (t856/128 builds 10^5 shards otherwise)."""
        build = self.__dict__.get("_build") if name == "shards" else None
        if build is None:
            raise AttributeError(name)
        shards = build()
        object.__setattr__(self, "shards", shards)
        return shards

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its shards made (the builder is a closure)."""
        _ = self.shards
        return {k: v for k, v in self.__dict__.items() if k != "_build"}

    @property
    def ranks(self) -> list[int]:
        return [s.rank for s in self.shards]

    def alike(self) -> dict[tuple[int, int, str, float], list[int]]:
        """(rows, cols, tier, cache fraction) -> the ranks of the shards of that shape, so that identical shards
        (data-parallel replicas, equal row or column blocks) are priced once."""
        memo = self.__dict__.get("_alike")  # shards are immutable: computed once per table plan
        if memo is None:
            memo = {}
            for s in self.shards:
                memo.setdefault((s.rows, s.cols, s.tier, s.cache_fraction), []).append(s.rank)
            object.__setattr__(self, "_alike", memo)
        return memo  # read-only: callers price shapes, they do not change them


@dataclass
class ShardingPlan:
    """Per-table plans for `world_size` ranks. `meta` records who planned it and the predicted figures
    (per-rank cost, lower bound, TorchRec's estimate) when the plan is saved; it does not affect equality."""

    world_size: int
    tables: dict[str, TablePlan]
    optimizer: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def __getitem__(self, name: str) -> TablePlan:
        return self.tables[name]

    def shards_by_rank(self) -> list[list[tuple[str, Shard]]]:
        out: list[list[tuple[str, Shard]]] = [[] for _ in range(self.world_size)]
        for tp in self.tables.values():
            for s in tp.shards:
                out[s.rank].append((tp.name, s))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT, "world_size": self.world_size, "optimizer": self.optimizer,
            "tables": {name: {"sharding_type": tp.sharding_type.value, "shards": [s.to_list() for s in tp.shards]}
                       for name, tp in self.tables.items()},
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: Any) -> ShardingPlan:
        if not isinstance(d, dict) or d.get("format") != PLAN_FORMAT:
            raise PlanError(f"not a plan file: expected format {PLAN_FORMAT!r}")
        if not isinstance(d.get("tables") or {}, dict) or not all(isinstance(t, dict) for t in d["tables"].values()):
            raise PlanError("plan file: `tables` must map each table name to {sharding_type, shards}")
        if not isinstance(d.get("meta") or {}, dict):
            raise PlanError("plan file: `meta` must be a mapping")
        tables: dict[str, TablePlan] = {}
        for name, tp in (d.get("tables") or {}).items():
            try:
                st = ShardingType(tp["sharding_type"])
            except (KeyError, ValueError, TypeError):
                raise PlanError(f"table {name!r}: missing or unknown sharding_type "
                                f"(one of {[s.value for s in ShardingType]})") from None
            if not isinstance(tp.get("shards", []), list):
                raise PlanError(f"table {name!r}: shards must be a list")
            shards = tuple(Shard.from_list(x, name) for x in tp.get("shards", []))
            tables[name] = TablePlan(name, st, shards)
        try:
            world = int(d["world_size"])
        except (KeyError, TypeError, ValueError):
            raise PlanError("plan file lacks an integer world_size") from None
        return cls(world, tables, str(d.get("optimizer", "")), dict(d.get("meta") or {}))

    def save(self, path: str | Path) -> None:
        """Write JSON atomically (temp file + rename), so a failed save leaves nothing behind."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, umask_mode())  # mkstemp's 0600 → what open() would give
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_dict(), f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path: str | Path) -> ShardingPlan:
        try:
            with open(path) as f:
                data = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise PlanError(f"plan file {path} is not valid JSON: {e}") from None
        try:
            return cls.from_dict(data)
        except PlanError as e:
            raise PlanError(f"plan file {path}: {e}") from None
