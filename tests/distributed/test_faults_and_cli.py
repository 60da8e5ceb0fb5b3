"""A rank that dies or raises ends the job, non-zero, within the timeout, naming the rank; bad input fails before
any rank starts; calibration writes a hardware config that loads."""
from __future__ import annotations

import time

import numpy as np
import pytest

from benchmarks import calibrate
from benchmarks.distributed import launch
from sharding.topology import load_topology
from tests.distributed.conftest import WORKLOAD


@pytest.mark.parametrize("fault, cause", [("kill", "killed by SIGKILL"), ("raise", "injected fault")])
def test_failed_rank_ends_job_within_timeout_and_keeps_records(tmp_path, capsys, fault, cause) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text('{"run_id": "earlier"}\n')
    timeout = 40
    t0 = time.perf_counter()
    rc = launch.main([*WORKLOAD, f"dist.fault={fault}", "dist.fault_rank=1", "dist.fault_step=1",
                      f"dist.timeout_s={timeout}", f"output.records={records}", f"dist.output_dir={tmp_path}"])
    elapsed = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert rc == 1
    assert elapsed < timeout, elapsed
    assert "rank(s) [1]" in err and "rank 1: " in err and cause in err, err
    assert records.read_text() == '{"run_id": "earlier"}\n'


@pytest.mark.parametrize("override, message", [("dist.plan=/no/such/plan.json", "no plan file"),
                                               ("dist.model=transformer", "dist.model"),
                                               ("dist.hardware=no_such_machine", "no hardware config"),
                                               ("workload.rows=[0]", "rows must be a positive")])
def test_bad_input_fails_before_spawning(tmp_path, capsys, override, message) -> None:
    records = tmp_path / "r.jsonl"
    assert launch.main(["workload=smoke", override, f"output.records={records}"]) == 2
    assert message in capsys.readouterr().err
    assert not records.exists()


@pytest.mark.slow
def test_calibration_writes_a_config_that_loads(tmp_path) -> None:
    import yaml

    out = tmp_path / "hw.yaml"
    assert calibrate.main(["--out", str(out), "--rows", "2000", "--repeats", "2", "--rounds", "1"]) == 0
    data = yaml.safe_load(out.read_text())
    assert data["machine"]["cores"] >= 1 and data["machine"]["copy_bandwidth"] > 0 and data["machine"]["loadavg"]
    assert data["lookup_model"]["forward"]["near_bandwidth"] > 0 and data["lookup_model"]["colocated_slowdown"] > 0
    assert set(data["fit_residuals"]) >= {"dense optimizer", "gloo all_to_all"}
    assert data["calibration"]["phase_s"]["torchrec_stages"] > 0
    topo = load_topology(out)
    assert topo.device == "cpu" and topo.world_size == 2
    assert topo.fast.bandwidth > 0 and topo.intra_host.bandwidth > 0 and topo.intra_host.latency >= 0
    assert "benchmarks.calibrate" in topo.sources["provenance"] and topo.sources["date"]
    assert topo.inter_host.source.startswith("not measured")


def test_fits_recover_known_constants() -> None:
    b = np.array([1e3, 1e4, 1e5, 1e6])
    assert calibrate.fit_bandwidth(b, b / 5e9) == pytest.approx(5e9)
    lat, bw = calibrate.fit_latency_bandwidth(b, 2e-4 + b / 1e9)
    assert lat == pytest.approx(2e-4) and bw == pytest.approx(1e9)


def test_stage_bandwidth_is_the_larger_plans_bytes_over_its_extra_time() -> None:
    stages = {k: 1e-3 for k in calibrate.STAGE_KEYS}
    times = {"TW": stages, "TW:big": dict(stages, lookup=3e-3, input_dist=0.5e-3)}
    nbytes = {"TW:big": {"lookup": 4e6, "input_dist": 1e5, "optimizer": 0.0}}
    assert calibrate.stage_bandwidths(times, nbytes) == {"TW": {"lookup": pytest.approx(2e9)}}  # no growth: left out
