"""A rank that dies or raises ends the job, non-zero, naming the rank (the time it takes: benchmarks.regress_walls); bad input fails before
any rank starts; calibration writes a hardware config that loads."""
from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import calibrate
from benchmarks.distributed import launch
from benchmarks.distributed.phases import PHASES, Watchdog
from sharding.topology import load_topology
from tests.distributed.conftest import WORKLOAD


@pytest.mark.slow  # spawns a 2-rank job; how long it takes to end is a figure of benchmarks.regress_walls
@pytest.mark.parametrize("fault, cause", [("kill", "killed by SIGKILL"), ("raise", "injected fault")])
def test_failed_rank_ends_job_naming_the_rank_and_keeps_records(tmp_path, capsys, fault, cause) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text('{"run_id": "earlier"}\n')
    rc = launch.main([*WORKLOAD, f"dist.fault={fault}", "dist.fault_rank=1", "dist.fault_step=1",
                      "dist.timeout_s=40", f"output.records={records}", f"dist.output_dir={tmp_path}"])
    err = capsys.readouterr().err
    assert rc == 1
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


@pytest.mark.slow  # a 2-rank calibration job
def test_calibration_writes_a_config_that_loads(tmp_path) -> None:
    import yaml

    out = tmp_path / "hw.yaml"
    assert calibrate.main(["--out", str(out), "--rows", "2000", "--repeats", "2", "--steps", "2", "--rounds", "1"]) == 0
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


def test_a_rank_stuck_past_the_timeout_ends_the_job_in_one_line_naming_the_phase(tmp_path, capsys) -> None:
    records = tmp_path / "records.jsonl"
    rc = launch.main([*WORKLOAD, "dist.fault=hang", "dist.fault_rank=1", "dist.fault_step=0", "dist.timeout_s=3",
                      f"output.records={records}", f"dist.output_dir={tmp_path}"])
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 1 and len(lines) == 1, lines
    assert "timed out in phase" in lines[0] and any(f"'{p}'" in lines[0] for p in PHASES), lines
    assert "dist.timeout_s=3" in lines[0] and not records.exists()


def test_watchdog_kills_the_ranks_of_a_phase_that_outlasts_the_timeout(tmp_path) -> None:
    (tmp_path / "rank0").write_text("done 0")
    (tmp_path / "rank1").write_text("steps 0")
    marker = "dlrmbench_watchdog_test_rank"
    child = subprocess.Popen([sys.executable, "-c", f"import time  # {marker}\ntime.sleep(600)"],
                             start_new_session=True)
    dog = Watchdog(str(tmp_path), 2, 0.5, marker, poll_s=0.05)
    dog.start()
    dog.join(timeout=60)
    assert dog.expired == ("steps", [1])
    assert child.wait(timeout=60) == -signal.SIGKILL


def test_world_size_beyond_this_machines_memory_is_refused_naming_the_limit() -> None:
    launch.check_world_size(4, 1e8, False, 1e6, available=8 * 2**30)
    with pytest.raises(ValueError, match=r"dist.world_size=64: .* at most 16 ranks fit"):
        launch.check_world_size(64, 0.0, False, 0.0, available=8 * 2**30)
    with pytest.raises(ValueError, match="dist.verify"):
        launch.check_world_size(8, 2**30, True, 0.0, available=8 * 2**30)
