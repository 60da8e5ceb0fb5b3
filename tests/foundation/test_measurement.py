"""Timing summaries, rate metrics, byte formulas and record writing."""
import json
import multiprocessing as mp

import numpy as np
import pytest
import torch

from benchmarks.records import append_records, read_records
from benchmarks.timing import Timing, rate_metric, time_calls
from embedding.spec import PoolingSpec, TableSpec, WorkloadSpec
from embedding.traffic import batch_traffic


def test_time_calls_warms_up_then_times_each_call():
    calls = []
    timing = time_calls(lambda i: calls.append(i), 3, warmup=2, repeats=5, device=torch.device("cpu"))
    assert calls == [0, 1, 0, 1, 2, 0, 1]  # 2 warm-up calls, then 5 timed, cycling over 3 inputs
    assert timing.seconds.shape == (5,) and (timing.seconds >= 0).all()


def test_rate_metric_uses_each_calls_own_amount():
    t = Timing(np.array([1.0, 2.0, 4.0, 1.0]), "test")
    m = rate_metric("r", np.array([10.0, 10.0]), t, "u/s", "how")  # amounts cycle: 10, 10, 10, 10
    assert m["value"] == m["median"] == 7.5  # rates 10, 5, 2.5, 10 → median 7.5
    assert m["min"] == 2.5 and m["max"] == 10 and m["repeats"] == 4
    assert m["p90"] == pytest.approx(np.percentile([10, 5, 2.5, 10], 10))


def test_traffic_formula():
    spec = WorkloadSpec("t", (TableSpec("a", 100, 8, pooling=PoolingSpec("fixed", 2)),
                              TableSpec("b", 100, 16, pooling=PoolingSpec("fixed", 3))), batch_size=4)
    lengths = np.array([[2, 2, 2, 2], [3, 3, 3, 3]])
    tr = batch_traffic(spec, lengths, "fp32")
    assert tr.rows_read == 8 * 8 * 4 + 12 * 16 * 4
    assert tr.indices_read == 20 * 8 + 9 * 8
    assert tr.outputs_written == 4 * 24 * 4
    assert tr.total == tr.rows_read + tr.indices_read + tr.outputs_written
    int8 = batch_traffic(spec, lengths, "int8", index_bytes=4)
    assert int8.rows_read == 8 * (8 + 4) + 12 * (16 + 4)
    train = batch_traffic(spec, lengths, "fp32", train=True)
    assert train.total == 3 * tr.total


def _writer(path, k):
    for i in range(50):
        append_records(path, [{"writer": k, "i": i, "pad": "x" * 5000}])


@pytest.mark.slow  # three spawned processes
def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / "r.jsonl"
    procs = [mp.get_context("spawn").Process(target=_writer, args=(str(path), k)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    recs = read_records(path)
    assert len(recs) == 150
    assert sorted((r["writer"], r["i"]) for r in recs) == [(k, i) for k in range(3) for i in range(50)]


def test_records_refuse_nan(tmp_path):
    with pytest.raises(ValueError):
        append_records(tmp_path / "r.jsonl", [{"v": float("nan")}])
    assert not (tmp_path / "r.jsonl").exists() or (tmp_path / "r.jsonl").read_text() == ""
    append_records(tmp_path / "r.jsonl", [{"v": np.float32(1.5), "a": np.arange(2)}])
    assert json.loads((tmp_path / "r.jsonl").read_text()) == {"v": 1.5, "a": [0, 1]}
