"""device-bw: the fit recovers a known bandwidth; a tiny CPU run writes a YAML with every point; bad input exits 2."""
import numpy as np
import pytest
import torch
import yaml

from benchmarks.calibrate import fit_latency_bandwidth as fit
from benchmarks.device_bw import main, measure


def test_fit_recovers_bandwidth_and_per_call_cost():
    b = np.array([1e6, 4e6, 1.6e7, 6.4e7])
    c, bw = fit(b, 20e-6 + b / 2e12)
    assert bw == pytest.approx(2e12, rel=1e-6) and c == pytest.approx(20e-6, rel=1e-6)


def test_cpu_measure_counts_bytes_as_the_cost_model(tmp_path):
    res = measure(torch.device("cpu"), 4096, repeats=2, dims=(16, 32), batches=(64, 128))
    assert len(res["points"]) == 2 * 2 * 2
    p = res["points"][0]
    ids = p["batch"] * 32
    assert p["bytes"] == ids * p["dim"] * 4 + ids * 8 + p["batch"] * p["dim"] * 4
    assert all(f["bandwidth"] > 0 for f in res["lookup"].values())
    assert res["copies"]["copy_bw"] > 0 and res["env"]["rows"] == 4096


def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "x.yaml"
    assert main(["--rows", "-1", "--out", str(out)]) == 2
    assert not out.exists()
    if not torch.cuda.is_available():
        assert main(["--device", "cuda", "--out", str(out)]) == 2
        assert "no GPU" in capsys.readouterr().err


def test_written_yaml_loads(tmp_path, monkeypatch):
    import benchmarks.device_bw as mod

    monkeypatch.setattr(mod, "DIMS", (16,))
    monkeypatch.setattr(mod, "BATCHES", (64, 256))
    out = tmp_path / "bw.yaml"
    assert main(["--device", "cpu", "--rows", "2048", "--repeats", "2", "--out", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    assert set(data["lookup"]) == {"uniform", "zipf1.05"} and data["env"]["date"]
