"""`dlrmbench regress`: regression checks that can tell a real change from machine noise.

  regress deterministic [--baseline results/baselines/deterministic_smoke.json] [--now FILE] [--save FILE]
      exact figures (trace statistics, cache hits/misses, NMP emulated cycles and bytes, plan costs of the
      deterministic planners) recomputed now and compared within a stated tolerance (default relative 1e-9).
  regress timed [--baseline FILE ...] [--save FILE] [--rounds 8] [--repeats 5] [--threshold 0.10] [--k 3] [--load]
  regress timed --compare BASELINE RUN
      kernels timed (CPU time) beside a reference kernel in the same process, interleaved, in several rounds; a
      regression needs the median ratio to move beyond max(threshold, k × the run-to-run noise), consistently
      across rounds, and again when the flagged kernel is measured afresh (see benchmarks/regress_timed.py).
Exit status: 0 pass, 1 regression, 2 bad input (one line on stderr, nothing written).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import OneLineParser, check_output_file

__all__ = ["DETERMINISTIC_OVERRIDES", "PLAN_SET", "Verdict", "deterministic_figures", "compare_figures",
           "format_table", "main"]

BASELINE = "results/baselines/deterministic_smoke.json"
DETERMINISTIC_OVERRIDES = ["workload=smoke", "backend=none", "cache=lru", "nmp=recnmp_base", "output.progress=false"]
PLAN_SET = {"tables": "criteo_kaggle", "hardware": "dgx_h100", "ranks": [4, 8],
            "optimizers": ["greedy_size", "greedy_lookups", "greedy_size_lookups", "round_robin"]}
TIMED_METRICS = {"generation_rate", "simulation_throughput", "plan_wall_s"}


@dataclass
class Verdict:
    metric: str
    baseline: float | None
    now: float | None
    change: float | None  # relative: now / baseline - 1
    verdict: str  # ok | REGRESSION | CHANGED | MISSING | new | improved
    note: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict in ("REGRESSION", "CHANGED", "MISSING")


def _flatten_records(records: Sequence[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in records:
        if r["kind"] == "plan":
            p = r["config"]["plan"]
            prefix = f"plan:{p['optimizer']}/{p['ranks']}r."
        elif r["kind"] in ("cache", "nmp"):
            prefix = f"{r['kind']}:"
        else:
            continue
        for m in r["metrics"]:
            if m["name"] not in TIMED_METRICS:
                out[prefix + m["name"] + (f"[{m['table']}]" if "table" in m else "")] = float(m["value"])
    return out


def deterministic_figures(overrides: Sequence[str] = ()) -> dict[str, float]:
    """Run the deterministic smoke (cache + NMP emulation, no timed backend) and plan a fixed table set with the
    deterministic planners; every figure is a pure function of code and seeds, never of machine speed."""
    from .compose import compose_config
    from .run import execute
    from .sweep import plan_records

    records = execute(compose_config([*DETERMINISTIC_OVERRIDES, *overrides]))
    figures = {}
    for k, v in records[0]["workload_stats"].items():
        if isinstance(v, list):
            figures.update({f"trace:{k}[{i}]": float(x) for i, x in enumerate(v)})
        else:
            figures[f"trace:{k}"] = float(v)
    figures.update(_flatten_records(records))
    figures.update(_flatten_records(plan_records(PLAN_SET["tables"], PLAN_SET["hardware"], PLAN_SET["optimizers"],
                                                 PLAN_SET["ranks"])))
    return figures


def compare_figures(baseline: dict[str, float], now: dict[str, float], rel_tol: float = 1e-9, abs_tol: float = 0.0,
                    tolerances: dict[str, float] | None = None) -> list[Verdict]:
    """Each figure must satisfy |now − baseline| ≤ abs_tol + tol·|baseline|, tol = the longest matching prefix in
    `tolerances` else rel_tol; a figure that vanished is MISSING, a new one is reported but passes."""
    tolerances = tolerances or {}
    out = []
    for key in sorted(set(baseline) | set(now)):
        b, n = baseline.get(key), now.get(key)
        if n is None:
            out.append(Verdict(key, b, None, None, "MISSING", "figure no longer produced"))
            continue
        if b is None:
            out.append(Verdict(key, None, n, None, "new", "not in the baseline"))
            continue
        tol = next((tolerances[p] for p in sorted(tolerances, key=len, reverse=True) if key.startswith(p)), rel_tol)
        change = (n / b - 1) if b else (0.0 if n == 0 else math.inf)
        ok = abs(n - b) <= abs_tol + tol * abs(b)
        out.append(Verdict(key, b, n, change, "ok" if ok else "CHANGED", f"tolerance rel {tol:g}, abs {abs_tol:g}"))
    return out


def format_table(rows: Sequence[Verdict], only_failed_and: int = 0) -> str:
    """metric | baseline | now | change | verdict; passing rows beyond the first `only_failed_and` are counted."""
    shown = [r for r in rows if r.verdict != "ok"] + [r for r in rows if r.verdict == "ok"][:only_failed_and]
    f = lambda v: "—" if v is None else f"{v:.6g}"  # noqa: E731
    ch = lambda v: "—" if v is None else ("inf" if math.isinf(v) else f"{v:+.2%}")  # noqa: E731
    head = ("metric", "baseline", "now", "change", "verdict", "how compared")
    body = [(r.metric, f(r.baseline), f(r.now), ch(r.change), r.verdict, r.note) for r in shown]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=False)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    out = [line(head), line(tuple("-" * w for w in widths))] + [line(b) for b in body]
    hidden = len(rows) - len(shown)
    fails = sum(r.failed for r in rows)
    out.append(f"{len(rows)} figures: {fails} regression(s)" + (f"; {hidden} more passing rows not shown" if hidden
                                                                 else ""))
    return "\n".join(out)


def _save(path: str, payload: dict) -> None:
    from .sweep import _write_atomic

    _write_atomic(Path(path), json.dumps(payload, indent=1, sort_keys=True) + "\n")


def _load(path: str, key: str = "figures") -> dict:
    """A saved run: `figures` {name: number} (deterministic) or `probes` {name: {ratios: [≥ 3 numbers]}} (timed);
    anything else is refused naming the file and what it lacks, before anything is measured."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read baseline {path}: {getattr(e, 'strerror', None) or e}") from None
    made_by = "regress timed --save" if key == "probes" else "regress deterministic --save"
    body = data.get(key) if isinstance(data, dict) else None
    if not isinstance(body, dict) or not body:
        raise ValueError(f"{path} is not a `{made_by}` file: it has no `{key}` mapping")
    for name, v in body.items():
        ok = (isinstance(v, dict) and isinstance(v.get("ratios"), list) and len(v["ratios"]) >= 3
              and all(_number(x) and x > 0 for x in v["ratios"])) if key == "probes" else _number(v)
        if not ok:
            want = "{ratios: [≥ 3 positive numbers]}" if key == "probes" else "a finite number"
            raise ValueError(f"{path}: {key}[{name!r}] is not {want}")
    return data


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _deterministic(args: argparse.Namespace) -> int:
    from .records import environment, git_sha

    base = None if args.save else _load(args.baseline)
    now = _load(args.now)["figures"] if args.now else deterministic_figures()
    if args.save:
        env = environment()
        _save(args.save, {"what": "deterministic figures of the smoke workload (trace statistics, LRU cache with "
                          "Belady/compulsory references, RecNMP-base emulation) and plan costs of the deterministic "
                          f"planners on {PLAN_SET['tables']} / {PLAN_SET['hardware']}; no timings",
                          "produced_by": "dlrmbench regress deterministic --save " + args.save,
                          "overrides": DETERMINISTIC_OVERRIDES, "plan_set": PLAN_SET, "git_sha": git_sha(),
                          "env": {k: env[k] for k in ("python", "torch", "numpy", "platform")}, "figures": now})
        print(f"wrote {len(now)} figures to {args.save}")
        return 0
    tolerances = {**base.get("tolerances", {}), **dict(_parse_tol(t) for t in args.tol)}
    rows = compare_figures(base["figures"], now, args.rel_tol, args.abs_tol, tolerances)
    print(f"deterministic check against {args.baseline} (git {base.get('git_sha', '?')})")
    print(format_table(rows, args.show))
    return 1 if any(r.failed for r in rows) else 0


def _parse_tol(text: str) -> tuple[str, float]:
    prefix, _, value = text.rpartition("=")
    try:
        return prefix, float(value)
    except ValueError:
        raise ValueError(f"--tol {text!r}: expected PREFIX=RELATIVE_TOLERANCE, e.g. nmp:=1e-6") from None


def _parse_plant(texts: Sequence[str]) -> dict[str, float]:
    out = {}
    for text in texts:
        name, _, value = text.rpartition("=")
        try:
            out[name] = float(value)
        except ValueError:
            raise ValueError(f"--plant {text!r}: expected PROBE=FACTOR, e.g. lru_simulate/frozen_lru=1.25") from None
        if not 1 <= out[name] <= 16:
            raise ValueError(f"--plant {text!r}: FACTOR must be in [1, 16]")
    return out


def _timed_rows(base_runs: list[dict[str, list[float]]], now: dict[str, list[float]], rule,
                recheck: Callable[[list[str]], dict[str, list[float]]] | None) -> tuple[list[Verdict], dict]:
    """Verdict rows and, per probe, what was decided (first pass and, for a flagged probe, the re-measure)."""
    from .regress_timed import decide

    rows, record = [], {}
    first = {}
    for name in sorted(set(now) | set().union(*base_runs)):
        runs = [r[name] for r in base_runs if name in r]
        if name not in now:
            rows.append(Verdict(name, float(np.median([np.median(r) for r in runs])), None, None, "MISSING",
                                "in the baseline, not measured now"))
        elif not runs:
            rows.append(Verdict(name, None, float(np.median(now[name])), None, "new", "not in the baseline"))
        else:
            first[name] = decide(runs, now[name], rule)
    again = recheck([n for n, d in first.items() if d.verdict == "slower"]) if recheck else {}
    for name, d in first.items():
        runs = [r[name] for r in base_runs if name in r]
        base_med = float(np.exp(np.median([np.median(np.log(r)) for r in runs])))
        verdict = {"ok": "ok", "faster": "improved", "slower": "REGRESSION"}[d.verdict]
        note = d.note(len(runs), len(now[name]))
        entry = {"first": d.verdict, "change": d.change, "bar": d.bar, "noise": d.noise}
        if name in again:
            d2 = decide(runs, again[name], rule)
            entry.update(remeasured=d2.verdict, remeasured_change=d2.change)
            confirmed = d2.verdict == "slower"
            verdict = "REGRESSION" if confirmed else "ok"
            note += (f"; re-measured {d2.change:+.1%}: " + ("confirmed" if confirmed else "not confirmed"))
        elif d.verdict == "slower":
            note += "; not re-measured (--compare)"
        entry["verdict"] = verdict
        record[name] = entry
        rows.append(Verdict(name, base_med, float(np.median(now[name])), d.change, verdict, note))
    return sorted(rows, key=lambda r: r.metric), record


def _check_timed_args(args: argparse.Namespace) -> None:
    if args.rounds < 3:
        raise ValueError(f"--rounds {args.rounds}: need ≥ 3 rounds")
    if args.repeats < 1:
        raise ValueError(f"--repeats {args.repeats}: need ≥ 1")
    if not 0 < args.threshold < 1:
        raise ValueError(f"--threshold {args.threshold}: must lie in (0, 1), e.g. 0.10 for 10%")
    if not args.k > 0:
        raise ValueError(f"--k {args.k}: must be > 0")
    if args.compare and (args.baseline or args.load or args.save or args.plant):
        raise ValueError("--compare BASELINE RUN measures nothing: --baseline, --save, --load do not apply")


def _timed(args: argparse.Namespace) -> int:
    import os
    from contextlib import nullcontext

    from .regress_load import LOAD_WHAT, background_load
    from .regress_timed import Rule, load_run, measure_run, run_payload, timed_probes

    rule = Rule(threshold=args.threshold, k=args.k)
    if args.compare:
        base, now = load_run(args.compare[0]), load_run(args.compare[1], "run")
        rows, _ = _timed_rows([base], now, rule, None)
        print(f"timed check (CPU-time ratios kernel/reference): {args.compare[1]} against {args.compare[0]}, "
              "no measuring")
        print(format_table(rows, len(rows)))
        return 1 if any(r.failed for r in rows) else 0
    base_runs = [load_run(b) for b in args.baseline]  # every baseline checked before anything is measured
    probes = timed_probes(_parse_plant(args.plant))
    load_before = os.getloadavg()
    with background_load() if args.load else nullcontext():
        now = measure_run(probes, args.rounds, args.repeats)

        def recheck(names: list[str]) -> dict[str, list[float]]:  # fresh rounds of the flagged probes only
            return measure_run({n: probes[n] for n in names}, args.rounds, args.repeats) if names else {}
        rows, record = _timed_rows(base_runs, now, rule, recheck) if base_runs else ([], {})
    load = LOAD_WHAT if args.load else "none started by the benchmark"
    payload = run_payload(probes, now, args.rounds, args.repeats, load, load_before)
    if record:
        payload["verdicts"] = {"baselines": args.baseline, "rule": vars(rule), "probes": record}
    if args.save:
        _save(args.save, payload)
        print(f"wrote {args.save}")
    planted = {n: p.planted for n, p in probes.items() if p.planted != 1}
    how = (f"CPU time, {args.rounds} rounds × {args.repeats} pairs; load average {load_before[0]:.2f} before, "
           f"{payload['loadavg_after'][0]:.2f} after; background load: {load}"
           + (f"; PLANTED slowdown {planted}" if planted else ""))
    if not base_runs:
        for name, r in now.items():
            print(f"{name}: median ratio {np.median(r):.3f} (rounds {min(r):.3f}–{max(r):.3f}; {probes[name].what})")
        print(how)
        return 0
    print(f"timed check (CPU-time ratios kernel/reference) against {len(base_runs)} baseline run(s): "
          + ", ".join(args.baseline))
    print(format_table(rows, len(rows)))
    print(how)
    return 1 if any(r.failed for r in rows) else 0


def main(argv: list[str]) -> int:
    ap = OneLineParser(prog="dlrmbench regress", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("deterministic", help="exact figures against a committed baseline")
    d.add_argument("--baseline", default=BASELINE)
    d.add_argument("--now", default=None, help="figures JSON (as --save writes) instead of recomputing")
    d.add_argument("--save", default=None, help="write the figures computed now here (a new baseline) and stop")
    d.add_argument("--rel-tol", type=float, default=1e-9)
    d.add_argument("--abs-tol", type=float, default=0.0)
    d.add_argument("--tol", action="append", default=[], help="PREFIX=REL per figure prefix, e.g. nmp:=1e-6")
    d.add_argument("--show", type=int, default=12, help="passing rows to show besides every failing one")
    t = sub.add_parser("timed", help="CPU-time ratios to a reference kernel against saved runs (between-run noise)")
    t.add_argument("--baseline", nargs="+", default=[], metavar="FILE",
                   help="one or more runs saved with --save (each its own process; 3 or more show the noise)")
    t.add_argument("--compare", nargs=2, default=None, metavar=("BASELINE", "RUN"),
                   help="compare two saved runs without measuring")
    t.add_argument("--save", default=None, help="write the run measured now here")
    t.add_argument("--rounds", type=int, default=8, help="independent rounds per run (≥ 3)")
    t.add_argument("--repeats", type=int, default=5, help="interleaved kernel/reference pairs per round (≥ 1)")
    t.add_argument("--threshold", type=float, default=0.10, help="relative change that counts (0.10 = 10%%)")
    t.add_argument("--k", type=float, default=3.0, help="times the run-to-run noise a change must exceed")
    t.add_argument("--load", action="store_true", help="measure under a background load the check starts and stops")
    t.add_argument("--plant", action="append", default=[], help=argparse.SUPPRESS)  # power benchmark only
    args = ap.parse_args(argv)
    try:
        if args.cmd == "timed":
            _check_timed_args(args)
        if args.cmd == "deterministic":
            if not (0 <= args.rel_tol < math.inf and 0 <= args.abs_tol < math.inf):
                raise ValueError(f"--rel-tol and --abs-tol must be finite and ≥ 0, got {args.rel_tol}, {args.abs_tol}")
            for t in args.tol:
                if not 0 <= _parse_tol(t)[1] < math.inf:
                    raise ValueError(f"--tol {t!r}: the tolerance must be finite and ≥ 0")
        if args.save:
            check_output_file(args.save, "--save")
        return _deterministic(args) if args.cmd == "deterministic" else _timed(args)
    except (ValueError, KeyError, OSError) as e:
        print(f"dlrmbench regress: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
