"""How often `dlrmbench regress timed` cries wolf, and how often it catches a real slowdown.

  python -m benchmarks.regress_power [--runs 20] [--baseline-runs 3] [--plants 1.25,2] [--out DIR]

Saves `--baseline-runs` runs as the baseline (alternately quiet and under --load, so it shows how whole runs move), then runs the check `--runs` times (each a fresh process, as in
CI) on unchanged code, quiet and under `--load` (two busy processes, one streaming memory), and `--runs` times under
load with one kernel really slowed by each factor of `--plants` (the kernel does that many times its own work; the
planted probe alternates run by run). Prints false alarms per figure, and detection per planted run, with the
machine's load average; writes every run and the summary to `--out`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main"]

PROBES = ("torch_forward/frozen_forward", "lru_simulate/frozen_lru")


def _run(out: Path, name: str, baseline: list[str], extra: list[str]) -> dict:
    """One `regress timed` in a fresh process; its saved run (with verdicts when a baseline is given)."""
    path = out / f"{name}.json"
    cmd = [sys.executable, "-m", "benchmarks.regress", "timed", "--save", str(path), *extra]
    if baseline:
        cmd += ["--baseline", *baseline]
    load0 = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == 2 or not path.exists():
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    data = json.loads(path.read_text())
    data["loadavg_run"] = [load0, os.getloadavg()[0]]
    return data


def _condition(out: Path, label: str, runs: int, baseline: list[str], load: bool, plant: float) -> dict:
    """Run the check `runs` times; count false alarms (unplanted probes flagged) and detections (planted probe)."""
    figures = false_first = false_final = detected = detected_first = 0
    planted_changes, loads, t0 = [], [], time.perf_counter()
    for i in range(runs):
        target = PROBES[i % len(PROBES)] if plant != 1 else None
        extra = (["--load"] if load else []) + ([f"--plant={target}={plant}"] if target else [])
        data = _run(out, f"{label}_{i:02d}", baseline, extra)
        loads.extend(data["loadavg_run"])
        for name, v in data["verdicts"]["probes"].items():
            if name == target:
                detected += v["verdict"] == "REGRESSION"
                detected_first += v["first"] == "slower"
                planted_changes.append(v["change"])
            else:
                figures += 1
                false_first += v["first"] == "slower"
                false_final += v["verdict"] == "REGRESSION"
        print(f"  {label} run {i + 1}/{runs}: " + ", ".join(
            f"{n} {v['change']:+.1%} {v['verdict']}" for n, v in data["verdicts"]["probes"].items())
            + f"  (load avg {data['loadavg_run'][0]:.1f})", flush=True)
    return {"condition": label, "runs": runs, "load": load, "plant": plant, "figures": figures,
            "false_alarms": false_final, "flagged_before_remeasure": false_first,
            "detected": detected, "detected_before_remeasure": detected_first,
            "planted_change_median": float(np.median(planted_changes)) if planted_changes else None,
            "loadavg_median": float(np.median(loads)), "loadavg_max": float(np.max(loads)),
            "wall_s": time.perf_counter() - t0}


def _table(rows: list[dict]) -> str:
    head = ("condition", "runs", "false alarms / figures", "detected / planted runs", "planted change (median)",
            "load avg median (max)")
    body = []
    for r in rows:
        fa = f"{r['false_alarms']}/{r['figures']} ({r['false_alarms'] / max(r['figures'], 1):.1%})"
        fa += f", {r['flagged_before_remeasure']} before re-measure"
        det = "—" if r["plant"] == 1 else (f"{r['detected']}/{r['runs']} ({r['detected'] / r['runs']:.0%}), "
                                            f"{r['detected_before_remeasure']} before re-measure")
        ch = "—" if r["planted_change_median"] is None else f"{r['planted_change_median']:+.1%}"
        body.append((r["condition"], str(r["runs"]), fa, det, ch, f"{r['loadavg_median']:.1f} ({r['loadavg_max']:.1f})"))
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=False)]
    line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(head), line(tuple("-" * w for w in widths)), *map(line, body)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.regress_power", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per condition (≥ 1)")
    ap.add_argument("--baseline-runs", type=int, default=6,
                    help="runs saved as the baseline, alternately quiet and under --load (≥ 1)")
    ap.add_argument("--plants", default="1.25,2", help="planted slowdown factors, comma-separated, each in (1, 16]")
    ap.add_argument("--conditions", default="quiet,load,planted",
                    help="which of quiet, load, planted to run (comma-separated)")
    ap.add_argument("--out", default="results/regress_power", help="folder for every run and summary.json")
    args = ap.parse_args(argv)
    try:
        plants = [float(x) for x in args.plants.split(",") if x]
    except ValueError:
        plants = []
    conditions = set(args.conditions.split(","))
    bad = (f"--runs {args.runs}: need ≥ 1" if args.runs < 1 else
           f"--baseline-runs {args.baseline_runs}: need ≥ 1" if args.baseline_runs < 1 else
           f"--plants {args.plants!r}: need factors in (1, 16], e.g. 1.25,2" if not plants
           or not all(1 < p <= 16 for p in plants) else
           f"--conditions {args.conditions!r}: allowed quiet, load, planted" if not conditions
           or conditions - {"quiet", "load", "planted"} else None)
    if bad:
        print(f"regress_power: error: {bad}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print(f"baseline: {args.baseline_runs} run(s), each a fresh process, every second one under --load so that the "
          f"baseline shows how whole runs move; load avg {os.getloadavg()[0]:.1f}", flush=True)
    baseline = []
    for i in range(args.baseline_runs):
        _run(out, f"baseline_{i}", [], ["--load"] if i % 2 else [])
        baseline.append(str(out / f"baseline_{i}.json"))
    plan = ([("unchanged, quiet", False, 1.0)] if "quiet" in conditions else []) + \
           ([("unchanged, --load", True, 1.0)] if "load" in conditions else []) + \
           ([(f"planted {p:g}x, --load", True, p) for p in plants] if "planted" in conditions else [])
    rows = []
    for label, load, plant in plan:
        print(f"{label}: {args.runs} run(s)", flush=True)
        rows.append(_condition(out, label.replace(" ", "").replace(",", "_").replace("--", ""), args.runs,
                               baseline, load, plant))
        rows[-1]["condition"] = label
        how = (f"each run a fresh process of `dlrmbench regress timed` (defaults: 8 rounds × 5 pairs, threshold 10%, "
               f"k 3, re-measure on suspicion) against {args.baseline_runs} baseline run(s) (alternately quiet and "
               "--load); --load = 2 busy + 1 streaming-memory process; 'quiet' = no load of ours (other users' load "
               f"shows in the load average); {time.perf_counter() - t0:.0f} s so far")
        (out / "summary.json").write_text(json.dumps({"rows": rows, "how": how}, indent=1) + "\n")
    print(_table(rows))
    print(how)
    return 0


if __name__ == "__main__":
    sys.exit(main())
