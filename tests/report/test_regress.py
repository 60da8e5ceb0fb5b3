"""The regression checks. Deterministic: identical runs pass, a changed or vanished figure is caught. Timed: the
decision rule on synthetic round ratios (a whole run shifted by load is not flagged, a consistent 25% slowdown is),
comparing saved runs, bad baselines, the planted slowdown and the background load. No assertion on a timing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from benchmarks.regress import BASELINE, main
from benchmarks.regress_load import background_load
from benchmarks.regress_timed import FORMAT, Probe, Rule, decide, measure_run


def _figures_file(tmp_path, change: dict | None = None, drop: str | None = None):
    figures = json.load(open(BASELINE))["figures"]
    figures.update(change or {})
    if drop:
        del figures[drop]
    path = tmp_path / "now.json"
    path.write_text(json.dumps({"figures": figures}))
    return str(path)


def test_identical_runs_pass(tmp_path, capsys):
    """Two fresh computations of the deterministic figures agree exactly (the committed baseline itself is checked
    by `dlrmbench regress deterministic` in .ci/run, so that changing a figure on purpose needs a new baseline)."""
    saved = tmp_path / "base.json"
    assert main(["deterministic", "--save", str(saved)]) == 0
    assert main(["deterministic", "--baseline", str(saved)]) == 0
    assert "0 regression(s)" in capsys.readouterr().out


def test_identical_figures_pass(tmp_path):
    assert main(["deterministic", "--now", _figures_file(tmp_path)]) == 0


def test_changed_deterministic_figure_is_caught(tmp_path, capsys):
    base = json.load(open(BASELINE))["figures"]
    now = _figures_file(tmp_path, {"cache:misses": base["cache:misses"] + 1})
    assert main(["deterministic", "--now", now]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("cache:misses "))
    assert "CHANGED" in row and "1 regression(s)" in out


def test_a_stated_tolerance_admits_a_small_change(tmp_path):
    base = json.load(open(BASELINE))["figures"]
    now = _figures_file(tmp_path, {"nmp:host.energy": base["nmp:host.energy"] * (1 + 1e-7)})
    assert main(["deterministic", "--now", now]) == 1
    assert main(["deterministic", "--now", now, "--tol", "nmp:host.energy=1e-6"]) == 0


def test_vanished_figure_is_caught(tmp_path):
    assert main(["deterministic", "--now", _figures_file(tmp_path, drop="plan:round_robin/8r.cost_ms")]) == 1


def test_missing_baseline_is_bad_input(tmp_path, capsys):
    assert main(["deterministic", "--baseline", str(tmp_path / "nope.json"), "--now", str(tmp_path / "x")]) == 2
    assert "cannot read" in capsys.readouterr().err


def _runs(rng, medians, rounds=6, spread=0.04):
    """Synthetic runs: each run's round ratios scatter (log-normal, `spread`) around that run's own median."""
    return [list(m * np.exp(rng.normal(0, spread, rounds))) for m in medians]


def test_a_whole_run_shifted_by_load_is_not_flagged():
    """Runs move as a whole by ±10% (load); a new run 12% above the baseline's centre, tight inside, is within the
    between-run noise. (The old test treated the rounds as independent samples and called this significant.)"""
    rng = np.random.default_rng(3)
    base = _runs(rng, [1.0, 1.10, 0.92, 1.06], spread=0.01)
    now = list(1.12 * np.exp(rng.normal(0, 0.01, 6)))
    d = decide(base, now)
    assert d.change > 0.08 and d.verdict == "ok", d


def test_a_consistent_25_percent_slowdown_is_flagged():
    rng = np.random.default_rng(4)
    base = _runs(rng, [1.0, 1.03, 0.98, 1.01])
    d = decide(base, list(1.25 * np.exp(rng.normal(0, 0.04, 6))))
    assert d.verdict == "slower" and d.change > d.bar, d


def test_one_wild_round_does_not_flag_a_run():
    rng = np.random.default_rng(5)
    base = _runs(rng, [1.0, 1.02, 0.99])
    now = list(np.exp(rng.normal(0, 0.04, 6)))
    now[2] = 3.0
    assert decide(base, now).verdict == "ok"


def test_a_single_baseline_run_falls_back_on_the_noise_floor():
    """One run cannot show the between-run spread: the floor (3%) stands in, so the bar is 3 × 3% × √2 ≈ 13%."""
    base = [[1.0] * 6]
    assert decide(base, [1.08] * 6).verdict == "ok"
    assert decide(base, [1.25] * 6).verdict == "slower"
    assert decide(base, [0.75] * 6).verdict == "faster"
    assert decide(base, [1.08] * 6, Rule(threshold=0.05, k=1)).verdict == "slower"


def _run_file(tmp_path, name, probes: dict[str, list[float]], **extra):
    path = tmp_path / name
    path.write_text(json.dumps({"format": FORMAT, "probes": {n: {"rounds": r} for n, r in probes.items()}, **extra}))
    return str(path)


def test_compare_two_saved_runs_without_measuring(tmp_path, capsys):
    base = _run_file(tmp_path, "a.json", {"k1": [1.0, 1.01, 0.99, 1.0], "k2": [2.0, 2.02, 1.98, 2.0]})
    same = _run_file(tmp_path, "b.json", {"k1": [1.01, 1.0, 0.99, 1.0], "k2": [2.0, 1.99, 2.01, 2.0]})
    slow = _run_file(tmp_path, "c.json", {"k1": [1.5, 1.52, 1.49, 1.5], "k2": [2.0, 1.99, 2.01, 2.0]})
    assert main(["timed", "--compare", base, same]) == 0
    assert "2 figures: 0 regression(s)" in capsys.readouterr().out
    assert main(["timed", "--compare", base, slow]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("k1 "))
    assert "REGRESSION" in row and "+50.00%" in row and "not re-measured" in row


@pytest.mark.parametrize("content, fault", [
    ("{not json", "not JSON"),
    ('{"what": "ratio samples", "repeats": 15, "probes": {"k": {"ratios": [1, 2, 3]}}}', "not a timed run of format"),
    (f'{{"format": "{FORMAT}", "probes": {{"k": {{"rounds": [1.0, -2.0, 1.0]}}}}}}', "≥ 3 positive finite ratios"),
    (f'{{"format": "{FORMAT}", "probes": []}}', "'probes' must be a non-empty object"),
    ("[1, 2]", "not a timed run of format"),
])
def test_a_bad_baseline_is_one_line_naming_the_file_and_the_fault(tmp_path, capsys, content, fault):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    good = _run_file(tmp_path, "good.json", {"k": [1.0, 1.0, 1.0]})
    saved = tmp_path / "never.json"
    assert main(["timed", "--compare", str(bad), good]) == 2
    assert main(["timed", "--baseline", str(bad), "--save", str(saved)]) == 2  # before anything is measured
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(str(bad) in line and fault in line for line in err), err
    assert not saved.exists()


def test_a_missing_baseline_says_how_to_make_one(tmp_path, capsys):
    assert main(["timed", "--baseline", str(tmp_path / "nope.json")]) == 2
    assert "no such file (make one with dlrmbench regress timed --save FILE)" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [(["--rounds", "2"], "--rounds 2"), (["--threshold", "0"], "--threshold"),
                                           (["--plant", "nosuch=1.25"], "no such probe")])
def test_bad_timed_options_are_rejected(capsys, args, message):
    assert main(["timed", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_planted_slowdown_is_real_work_of_the_kernel():
    calls = {"kernel": 0, "reference": 0}

    def count(which):
        return lambda: calls.__setitem__(which, calls[which] + 1)
    probe = Probe(count("reference"), count("kernel"), calls=4, what="counter", planted=1.25)
    probe.kernel_sample()
    probe.reference_sample()
    assert calls == {"kernel": 5, "reference": 4}
    measure_run({"counter": Probe(count("reference"), count("kernel"), 4, "counter", 2.0)}, rounds=3, repeats=1)
    assert calls["kernel"] - 5 == 2 * (calls["reference"] - 4)  # warm-up + 3 rounds, twice the work each


def test_a_measured_run_saves_round_ratios_that_compare_loads(tmp_path, capsys):
    saved = tmp_path / "run.json"
    assert main(["timed", "--rounds", "3", "--repeats", "1", "--save", str(saved)]) == 0
    data = json.loads(saved.read_text())
    assert data["format"] == FORMAT and data["rounds"] == 3 and data["clock"].startswith("time.process_time")
    assert all(len(p["rounds"]) == 3 and p["planted"] == 1.0 for p in data["probes"].values())
    assert main(["timed", "--compare", str(saved), str(saved)]) == 0  # a run against itself: no change at all
    assert "0 regression(s)" in capsys.readouterr().out


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_background_load_is_stopped_on_leaving_and_on_an_error():
    with background_load() as pids:
        assert len(pids) == 3 and all(_alive(p) for p in pids)
    assert not any(_alive(p) for p in pids)
    with pytest.raises(KeyboardInterrupt), background_load() as pids:
        raise KeyboardInterrupt  # what Ctrl-C raises
    assert not any(_alive(p) for p in pids)


def test_background_load_ends_when_its_parent_is_killed(tmp_path):
    """SIGKILL skips every finally: the load processes notice their parent is gone and exit by themselves."""
    pidfile = tmp_path / "pids"
    code = textwrap.dedent(f"""
        import time
        from benchmarks.regress_load import background_load
        with background_load() as pids:
            open({str(pidfile)!r}, "w").write(" ".join(map(str, pids)))
            time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=os.getcwd())
    try:
        while parent.poll() is None and not (pidfile.exists() and pidfile.read_text()):
            time.sleep(0.1)
        pids = [int(p) for p in pidfile.read_text().split()]
        assert all(_alive(p) for p in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    for _ in range(300):  # each polls its parent every 0.2 s (the streaming one after each 128 MiB copy)
        if not any(_alive(p) for p in pids):
            break
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def test_the_frozen_lru_reference_does_the_live_simulators_work():
    """The LRU probe's reference must count exactly the hits the live simulator counts on the probe's streams (the
    same work, hence the same memory traffic), with every table's cache smaller than its distinct rows."""
    from benchmarks.compose import compose_workload
    from benchmarks.regress_reference import frozen_lru_hits
    from benchmarks.regress_timed import LRU_FRACTION
    from embedding.cache.workload import simulate_batches, table_capacities, table_streams
    from embedding.generate import generate_batches

    spec = compose_workload(["workload=smoke"])
    batches = generate_batches(spec)
    streams = [np.asarray(k, np.int64) for k in table_streams(batches, len(spec.tables))]
    caps = table_capacities(spec.tables, "per_table", 0, 0, LRU_FRACTION)
    assert all(c < np.unique(s).size for s, c in zip(streams, caps, strict=True))
    live = simulate_batches(batches, spec.tables, "lru", capacity_fraction=LRU_FRACTION).overall.hits
    assert frozen_lru_hits(streams, caps) == live > 0
