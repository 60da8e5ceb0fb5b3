"""Sharded (TorchRec DMP, 2 gloo ranks) against unsharded: forward per feature for TW, RW, CW, TWRW and DP, one
training step's weights, the full DLRM step; and what the records of such a job hold."""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.distributed.stages import STAGES
from tests.distributed.conftest import TYPES


def _verify(record: dict, kind: str) -> dict[str, float]:
    return {m["table"]: m["value"] for m in record["metrics"] if m["name"] == f"verify_{kind}_max_abs_diff"}


def test_job_succeeds_with_one_record_per_case(job) -> None:
    rc, records, _ = job
    assert rc == 0
    assert set(records) == {"embedding_train", "dlrm_train", "embedding_inference"}


def test_sharded_forward_equals_unsharded_per_feature_for_every_type(job) -> None:
    _, records, _ = job
    for case in ("embedding_train", "embedding_inference"):
        fwd = _verify(records[case], "forward")
        assert set(fwd) == set(TYPES)  # one table per sharding type: TW, RW, CW, TWRW, DP
        assert all(v < 1e-5 for v in fwd.values()), fwd
    assert records["embedding_train"]["plan"]["sharding_types"] == {"TW": 1, "RW": 1, "CW": 1, "TWRW": 1, "DP": 1}


def test_training_step_updates_weights_as_unsharded(job) -> None:
    _, records, _ = job
    upd = _verify(records["embedding_train"], "update")
    assert {k.split(".")[1] for k in upd} == set(TYPES)
    assert all(v < 1e-6 for v in upd.values()), upd  # row-wise Adagrad moves each touched weight by ≈ lr = 0.01


def test_full_dlrm_step_runs_and_matches_unsharded(job) -> None:
    _, records, _ = job
    rec = records["dlrm_train"]
    assert _verify(rec, "forward")["logits"] < 1e-5
    upd = _verify(rec, "update")
    assert any(k.startswith("dense_arch") for k in upd) and any(k.startswith("over_arch") for k in upd)
    assert all(v < 1e-6 for v in upd.values()), upd
    step = next(m for m in rec["metrics"] if m["name"] == "step_time")
    assert 0 < step["median"] <= step["p90"] and step["repeats"] == 2


def test_records_share_one_run_id_and_hold_every_rank_stage_and_bytes(job) -> None:
    _, records, out = job
    assert len({r["run_id"] for r in records.values()}) == 1
    rec = records["embedding_train"]
    for name in (*STAGES, "embedding_time", "input_dist_bytes", "output_dist_bytes", "predicted_rank_time"):
        assert sorted(m["rank"] for m in rec["metrics"] if m["name"] == name) == [0, 1], name
    by = {m["name"]: m for m in rec["metrics"] if "rank" not in m}
    assert by["samples_per_s"]["value"] > 0 and by["slowest_rank"]["value"] in (0, 1)
    assert by["imbalance"]["value"] >= 1.0
    out_bytes = [m["value"] for m in rec["metrics"] if m["name"] == "output_dist_bytes"]
    assert all(v > 0 for v in out_bytes)
    run_dir = Path(rec["output_dir"])
    assert run_dir.parent == out and run_dir.name == rec["run_id"]
    assert Path(rec["plan"]["file"]).is_file()
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["run_id"] == rec["run_id"] for line in lines)
