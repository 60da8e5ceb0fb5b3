"""Run several cases in one distributed job and read back their records (validate-cost and compare-plans)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from benchmarks.records import new_run_id, read_records

from .launch import launch

__all__ = ["run_cases", "metric_value", "rank_values"]


def run_cases(cases: list[dict], overrides: list[str], world_size: int, records: str, timeout_s: float,
              ) -> tuple[int, list[dict]]:
    """cases: [{"label", "overrides", "plan"}]; returns (exit code, this job's records in case order)."""
    run_id = new_run_id()
    fd, path = tempfile.mkstemp(prefix="dlrmbench-cases-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cases, f)
    try:
        rc = launch([*overrides, f"dist.cases={path}", f"output.records={records}",
                     f"dist.timeout_s={timeout_s}"], world_size, timeout_s, run_id)
    finally:
        os.unlink(path)
    found = [r for r in read_records(records) if r.get("run_id") == run_id] if Path(records).exists() else []
    return rc, found


def metric_value(record: dict, name: str, rank: int | None = None) -> float | None:
    for m in record["metrics"]:
        if m["name"] == name and m.get("rank") == rank:
            return float(m["value"])
    return None


def rank_values(record: dict, name: str) -> list[float]:
    vals = sorted((m["rank"], m["value"]) for m in record["metrics"] if m["name"] == name and "rank" in m)
    return [v for _, v in vals]
