"""`dlrmbench regress`: regression checks that can tell a real change from machine noise.

  regress deterministic [--baseline results/baselines/deterministic_smoke.json] [--now FILE] [--save FILE]
      exact figures (trace statistics, cache hits/misses, NMP emulated cycles and bytes, plan costs of the
      deterministic planners) recomputed now and compared within a stated tolerance (default relative 1e-9).
  regress timed [--baseline FILE] [--save FILE] [--repeats N] [--threshold 0.10] [--alpha 0.01]
      kernels timed beside a reference kernel in the same process, interleaved; each repeat gives a ratio
      candidate/reference, so machine speed and load cancel. Saved ratio samples from an earlier run are compared
      with a one-sided Mann-Whitney U test: a regression needs median change > threshold AND p < alpha.
Exit status: 0 pass, 1 regression, 2 bad input (one line on stderr, nothing written).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import OneLineParser, check_output_file

__all__ = ["DETERMINISTIC_OVERRIDES", "PLAN_SET", "Verdict", "deterministic_figures", "compare_figures",
           "measure_pair", "compare_samples", "timed_probes", "format_table", "main"]

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


def measure_pair(reference: Callable[[], object], candidate: Callable[[], object], repeats: int = 15,
                 warmup: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of `repeats` calls of each, interleaved (the order alternates every repeat so drift hits both)."""
    for _ in range(warmup):
        reference()
        candidate()
    ref, cand = np.empty(repeats), np.empty(repeats)
    for i in range(repeats):
        for which in ((0, 1) if i % 2 == 0 else (1, 0)):
            fn = reference if which == 0 else candidate
            t0 = time.perf_counter()
            fn()
            (ref if which == 0 else cand)[i] = time.perf_counter() - t0
    return ref, cand


def compare_samples(name: str, baseline: Sequence[float], now: Sequence[float], threshold: float = 0.10,
                    alpha: float = 0.01) -> Verdict:
    """Larger is slower. REGRESSION iff median(now)/median(baseline) − 1 > threshold and a one-sided
    Mann-Whitney U test (now stochastically greater) gives p < alpha; improved symmetrically; else ok."""
    from scipy.stats import mannwhitneyu

    b, n = np.asarray(baseline, dtype=float), np.asarray(now, dtype=float)
    if b.size < 3 or n.size < 3:
        raise ValueError(f"{name}: need ≥ 3 samples on each side for the U test, got {b.size} and {n.size}")
    change = float(np.median(n) / np.median(b) - 1)
    p_slower = float(mannwhitneyu(n, b, alternative="greater").pvalue)
    p_faster = float(mannwhitneyu(n, b, alternative="less").pvalue)
    if change > threshold and p_slower < alpha:
        verdict, p = "REGRESSION", p_slower
    elif change < -threshold and p_faster < alpha:
        verdict, p = "improved", p_faster
    else:
        verdict, p = "ok", min(p_slower, p_faster)
    return Verdict(name, float(np.median(b)), float(np.median(n)), change, verdict,
                   f"Mann-Whitney U p={p:.2g} ({b.size}+{n.size} samples), threshold {threshold:.0%}, alpha {alpha}")


def timed_probes() -> dict[str, tuple[Callable[[], object], Callable[[], object], str]]:
    """name → (reference, candidate, what): hot kernels paired with a reference of the same data and size."""
    import torch

    from embedding.backends import build_backend, init_weights
    from embedding.cache.workload import shared_stream, simulate_batches
    from embedding.generate import generate_batches

    from .compose import compose_workload

    spec = compose_workload(["workload=smoke"])
    batches = generate_batches(spec)
    weights = init_weights(spec)
    backend = build_backend("torch", spec, weights, torch.device("cpu"), "fp32", 0.01)
    inputs = backend.prepare(batches[0])
    table = torch.cat([w for w in weights])  # rows of all tables, one gather
    offsets = np.concatenate([[0], np.cumsum([t.rows for t in spec.tables])[:-1]])
    rows = torch.from_numpy(np.concatenate([batches[0].table_indices(t) + offsets[t]
                                            for t in range(spec.num_tables)]).astype(np.int64))
    keys = shared_stream(batches, spec.tables)[0]

    def forward() -> None:
        with torch.no_grad():
            backend.forward(inputs)

    return {
        "torch_forward/gather": (lambda: table.index_select(0, rows), forward,
                                 "torch EmbeddingBag forward of one smoke batch / index_select of the same rows"),
        "lru_simulate/unique": (lambda: np.unique(keys),
                                lambda: simulate_batches(batches, spec.tables, "lru", capacity_fraction=0.2),
                                "exact LRU simulation of the smoke batches / np.unique over the same lookups"),
    }


def run_timed(repeats: int) -> dict[str, dict]:
    """Ratio samples (candidate / reference per repeat) of every probe."""
    out = {}
    for name, (ref, cand, what) in timed_probes().items():
        r, c = measure_pair(ref, cand, repeats)
        out[name] = {"what": what, "ratios": (c / r).tolist(), "reference_s_median": float(np.median(r))}
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


def _timed(args: argparse.Namespace) -> int:
    if args.baseline and not Path(args.baseline).is_file():
        raise ValueError(f"timed baseline {args.baseline} does not exist (make one with --save)")
    base = _load(args.baseline, "probes")["probes"] if args.baseline else None
    now = run_timed(args.repeats)
    if args.save:
        _save(args.save, {"what": "ratio samples candidate/reference measured in one process (machine-specific)",
                          "repeats": args.repeats, "probes": now})
        print(f"wrote {args.save}")
    if not args.baseline:
        for name, p in now.items():
            print(f"{name}: median ratio {np.median(p['ratios']):.3f} over {args.repeats} repeats ({p['what']})")
        return 0
    rows = [compare_samples(n, base[n]["ratios"], now[n]["ratios"], args.threshold, args.alpha)
            if n in base else Verdict(n, None, float(np.median(now[n]["ratios"])), None, "new") for n in now]
    print(f"timed check (ratios candidate/reference) against {args.baseline}")
    print(format_table(rows, len(rows)))
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
    t = sub.add_parser("timed", help="same-process ratio timings against a saved run (U test)")
    t.add_argument("--baseline", default=None)
    t.add_argument("--save", default=None)
    t.add_argument("--repeats", type=int, default=15)
    t.add_argument("--threshold", type=float, default=0.10, help="relative slow-down that counts (0.10 = 10%%)")
    t.add_argument("--alpha", type=float, default=0.01, help="significance level of the U test")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "timed" and (args.repeats < 3 or not 0 < args.alpha < 1 or not 0 <= args.threshold < math.inf):
            raise ValueError(f"need --repeats ≥ 3, 0 < --alpha < 1, --threshold ≥ 0; got {args.repeats}, "
                             f"{args.alpha}, {args.threshold}")
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
