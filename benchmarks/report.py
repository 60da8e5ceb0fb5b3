"""`dlrmbench report RECORDS.jsonl... --out DIR`: a markdown and HTML report with PNG plots (matplotlib, Agg).

Each figure answers one question and sits beside the table of the numbers it draws:
backends on one workload and mode (horizontal bars, error bars = each record's spread); throughput against mean
pooling and against skew (the swept parameter on x; a line joins only records whose configs differ in that
parameter alone); hit rate against cache size (Belady and compulsory references); per-rank plan comparison; NMP
speedup against ranks. Points the machine's load or an overlapping spread make doubtful are marked (benchmarks/trust).
Bad input (missing file, no records): one line on stderr, exit 2, nothing written.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import sys
import tempfile
import textwrap
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from serving.report import plot_serving  # noqa: E402

from .errors import OneLineParser, check_output_dir  # noqa: E402
from .nmp_bound import nmp_bound  # noqa: E402
from .records import read_records, umask_mode  # noqa: E402
from .trust import busy_reason, flagged, interval  # noqa: E402

__all__ = ["Figure", "load", "figures", "build_report", "main"]


@dataclass
class Figure:
    """One picture, its caption and the numbers it shows (head + rows, rendered as a markdown table)."""

    name: str
    heading: str
    fig: plt.Figure
    caption: str
    head: list[str]
    rows: list[list[str]]


def load(paths: Sequence[str]) -> list[dict]:
    records = []
    for p in paths:
        if not Path(p).is_file():
            raise ValueError(f"records file {p} does not exist")
        try:
            found = read_records(p)
        except (ValueError, OSError) as e:  # JSONDecodeError, UnicodeDecodeError are ValueErrors
            raise ValueError(f"{p}: not JSON lines ({getattr(e, 'strerror', None) or e})") from None
        for i, r in enumerate(found):
            if not (isinstance(r, dict) and isinstance(r.get("kind"), str) and isinstance(r.get("metrics"), list)
                    and all(isinstance(m, dict) and isinstance(m.get("name"), str)
                            and isinstance(m.get("value"), (int, float)) for m in r["metrics"])):
                raise ValueError(f"{p}: record {i + 1} is not a dlrmbench record (needs kind and metrics with "
                                 "name and value)")
        records += found
    if not records:
        raise ValueError(f"no records in {', '.join(paths)}")
    return records


def _m(rec: dict, name: str) -> dict | None:
    return next((m for m in rec.get("metrics", []) if m["name"] == name and "table" not in m), None)


def _cfg(rec: dict, path: str, default=None):
    node = rec.get("config", {})
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def _flat(node, prefix: str = "") -> dict[str, str]:
    if isinstance(node, dict):
        return {k: v for key, sub in node.items() for k, v in _flat(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: json.dumps(node, sort_keys=True)}


def _machine(recs: list[dict]) -> str:
    envs = {(e.get("cpu"), e.get("gpu"), e.get("torch"), e.get("fbgemm_gpu"), e.get("torchrec"), e.get("host"))
            for e in (r.get("env", {}) for r in recs)}
    return "Machine: " + "; ".join(f"{cpu}{' + ' + gpu if gpu else ''} ({host}), torch {t}, fbgemm {f}, "
                                   f"torchrec {tr}" for cpu, gpu, t, f, tr, host in sorted(envs, key=str)) + "."


def _counts(recs: list[dict], metric: str, labels: Sequence[str] | None = None) -> str:
    """Repeats and warm-up as each record says: '10 timed calls after 3 warm-up' when all agree, else per label
    ('torch 30, fbgemm 10 timed calls after 3 warm-up')."""
    per = [((_m(r, metric) or {}).get("repeats"), _cfg(r, "bench.warmup")) for r in recs]
    if len(set(per)) == 1:
        reps, warm = per[0]
        return f"{reps or '?'} timed calls" + (f" after {warm} warm-up" if warm is not None else "")
    labels = labels or [str(i) for i in range(len(recs))]
    return ", ".join(f"{lab}: {reps or '?'} timed calls after {warm if warm is not None else '?'} warm-up"
                     for lab, (reps, warm) in zip(labels, per, strict=True))


def _load_text(rec: dict) -> str:
    load = rec.get("load")
    if not load:
        return "not recorded"
    return f"{load['loadavg_before']:.1f}→{load['loadavg_after']:.1f} / {load['cpus']} cores"


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1e3 else f"{v:.3g}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()


def _latest(recs: list[dict], key: Callable[[dict], object]) -> dict:
    """The latest record (records are in time order) per key."""
    out: dict = {}
    for r in recs:
        out[key(r)] = r
    return out


# ----- backends on one workload and mode -----

HOW_OFTEN = ("bench.repeats", "bench.warmup", "bench.ceilings", "bench.ceiling_buffer_mib", "bench.overhead",
             "bench.model", "bench.max_memory_fraction")
"""Settings that change how often or what else is measured, not what a point measures: points that differ only
in these are comparable (each caption and table gives every point's own repeats)."""


def _config_key(r: dict, leave_out: Sequence[str]) -> tuple:
    """The record's config (without `output`, HOW_OFTEN and the paths left out) as a hashable key."""
    flat = _flat({k: v for k, v in r.get("config", {}).items() if k != "output"})
    return tuple(sorted((k, v) for k, v in flat.items() if k not in leave_out and k not in HOW_OFTEN))


def _workload_title(r: dict) -> str:
    w = r["workload"]
    cap = f", rows ≤ {w['row_cap']:,}" if w.get("row_cap") else ""
    return (f"{w['name']} ({w.get('tables', '?')} tables, batch {w.get('batch_size', '?')}, "
            f"L={w['lookups_per_sample']:g}{cap}), {w.get('mode', 'inference')}")


def backend_figures(records: list[dict]) -> list[Figure]:
    """One figure per configuration but for the backend (so one workload and mode): each backend × precision's
    latest record as a horizontal bar. Configurations with a single backend are drawn only when no configuration
    has two (a sweep's single-backend points belong in the sweep figures)."""
    recs = [r for r in records if r.get("kind") == "lookup" and _m(r, "samples_per_s")]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in recs:
        groups[_config_key(r, ("backend.names", "backend.precision"))].append(r)
    n_bars = {k: len({(r["backend"], r.get("precision")) for r in g}) for k, g in groups.items()}
    if any(n > 1 for n in n_bars.values()):
        groups = {k: g for k, g in groups.items() if n_bars[k] > 1}
    titles = defaultdict(list)
    for key, group in groups.items():
        titles[_workload_title(group[0])].append(key)
    out = []
    for key, group in groups.items():
        title = _workload_title(group[0])
        same = titles[title]
        if len(same) > 1:  # equal workload summaries: name what else differs (threads, pooling, seed...)
            diff = sorted({k for other in same for k, v in other if dict(key).get(k) != v})
            title += " — " + ", ".join(f"{k.split('.')[-1]}={json.loads(dict(key)[k]) if k in dict(key) else '-'}"
                                       for k in diff[:3])
        latest = list(_latest(group, lambda r: (r["backend"], r.get("precision", ""))).values())
        latest.sort(key=lambda r: (r["backend"], r.get("precision", "")))
        labels = [f"{r['backend']} {r.get('precision', '')}".strip() for r in latest]
        marks = flagged([(lab, _m(r, "samples_per_s"), r.get("load"))  # the spread the bars show
                         for lab, r in zip(labels, latest, strict=True)])
        fig, axes = plt.subplots(1, 2, figsize=(11, 1.2 + 0.55 * len(latest)), squeeze=False)
        kinds = set()
        for ax, (name, unit) in zip(axes[0], [("samples_per_s", "samples/s"), ("effective_bw", "effective GB/s")],
                                    strict=True):
            ms = [_m(r, name) for r in latest]
            vals = [m["value"] if m else 0.0 for m in ms]
            spans = [interval(m) if m else (0.0, 0.0, "") for m in ms]
            kinds |= {s[2] for s in spans if s[2]}
            err = [[max(v - lo, 0) for v, (lo, _, _) in zip(vals, spans, strict=True)],
                   [max(hi - v, 0) for v, (_, hi, _) in zip(vals, spans, strict=True)]]
            bars = ax.barh(range(len(latest)), vals, xerr=err, capsize=3, color="tab:blue", alpha=0.8)
            ax.bar_label(bars, [_fmt(v) for v in vals], fontsize=7, padding=2)
            for bar, lab in zip(bars, labels, strict=True):
                if lab in marks:
                    bar.set_hatch("//")
                    bar.set_color("tab:orange")
            ax.set_yticks(range(len(latest)), [lab + (" (!)" if lab in marks else "") for lab in labels],
                          fontsize=8)
            ax.invert_yaxis()
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            ax.set_xlabel(unit)
            ax.grid(axis="x", alpha=0.3)
        axes[0][0].set_title(f"Which backend is fastest on {title}?", fontsize=9, loc="left")
        mode = latest[0]["workload"].get("mode", "inference")
        train = mode == "train"
        what = "training step (forward, backward, optimizer)" if train else "forward (torch.no_grad)"
        method = (_m(latest[0], "effective_bw") or {}).get("method", "")
        formula = method.split("; ", 1)[1] if "; " in method else ""
        counts = _counts(latest, "samples_per_s", labels)
        caption = (f"{_machine(latest)} Each bar: median of its record's timed calls ({counts}), one {what} per "
                   f"call; error bars: {' or '.join(sorted(kinds))} of the calls. "
                   + (f"GB/s: {formula}. " if formula else "")
                   + ("Hatched (!): " + "; ".join(f"{k}: {v}" for k, v in marks.items()) + "." if marks else ""))
        head = ["backend", "samples/s (median)", "spread", "GB/s", "repeats", "warm-up", "load avg", "note"]
        rows = []
        for lab, r in zip(labels, latest, strict=True):
            s, bw = _m(r, "samples_per_s"), _m(r, "effective_bw")
            lo, hi, kind = interval(s)
            rows.append([lab, _fmt(s["value"]), f"{_fmt(lo)}–{_fmt(hi)} ({kind})", _fmt(bw["value"]) if bw else "",
                         str(s.get("repeats", "")), str(_cfg(r, "bench.warmup", "")), _load_text(r),
                         marks.get(lab, "")])
        name = f"backends_{_slug(latest[0]['workload']['name'])}_{mode}"
        name += f"_{len(out)}" if any(f.name == name for f in out) else ""
        out.append(Figure(name, f"Backends: {title}", fig, caption, head, rows))
    return out


# ----- sweeps: the swept parameter on x, one line per series -----

def _series(recs: list[dict], x_paths: tuple[str, ...]) -> dict[tuple, list[dict]]:
    """Records grouped so that a series differs only in the x parameter(s): config key → records (latest per x;
    one per backend too, as one run times several backends under one config)."""
    series: dict[tuple, dict] = defaultdict(dict)
    for r in recs:
        key = _config_key(r, x_paths) + (("backend", json.dumps(r.get("backend"))),)
        series[key][tuple(json.dumps(_cfg(r, p)) for p in x_paths)] = r
    return {k: list(v.values()) for k, v in series.items()}


def _label(key: tuple, distinct: list[str], rec: dict) -> str:
    d = dict(key)
    parts = [f"{p.split('.')[-1]}={json.loads(d[p]) if p in d else '-'}" for p in distinct
             if p not in ("backend.names", "backend")]
    what = rec.get("backend") or {"cache": _cfg(rec, "cache.policy"), "nmp": _cfg(rec, "nmp.mode")}.get(rec.get("kind"))
    return " ".join([what or "", *parts]).strip() or "all records"


def _line_figure(name: str, heading: str, question: str, recs: list[dict], x_paths: tuple[str, ...],
                 x_of: Callable[[dict], float], y_metric: str, y_scale: float, xlabel: str, ylabel: str,
                 refs: Sequence[tuple[str, Callable[[dict], float | None], str]] = (), logx: bool = False,
                 require_series: bool = True, ideal: bool = False) -> Figure | None:
    """A line per series (configs equal but for x_paths). Single-point series are drawn only when no series has
    two points (then the caption says so); points of records taken on a busy machine get a red ring."""
    series = _series(recs, x_paths)
    lines = {k: v for k, v in series.items() if len(v) > 1}
    single = not lines
    if single and (require_series or not series):
        return None
    lines = lines or series
    distinct = sorted({k for key in lines for k, _ in key if len({dict(s).get(k) for s in lines}) > 1})
    fig, ax = plt.subplots(figsize=(8, 4.6))
    head = ["series", xlabel, ylabel, "spread", "repeats", "load avg", "note"]
    rows, busy, reps, all_x, ys_all = [], 0, set(), set(), []
    def order(kv):  # numbers by value, the rest by name: mean=4 before mean=16
        d = dict(kv[0])
        vals = [json.loads(d[p]) if p in d else None for p in distinct]
        return [(0, v, "") if isinstance(v, int | float) else (1, 0, str(v)) for v in vals]

    for i, (key, group) in enumerate(sorted(lines.items(), key=order)):
        group = sorted(group, key=x_of)
        label = _label(key, distinct, group[0])
        xs = [x_of(r) for r in group]
        all_x |= set(xs)
        ms = [_m(r, y_metric) for r in group]
        ys = [m["value"] / y_scale for m in ms]
        ys_all += ys
        spans = [interval(m) for m in ms]
        err = [[max(y - lo / y_scale, 0) for y, (lo, _, _) in zip(ys, spans, strict=True)],
               [max(hi / y_scale - y, 0) for y, (_, hi, _) in zip(ys, spans, strict=True)]]
        color = f"C{i % 10}"
        has_spread = any(m.get("repeats") for m in ms)
        ax.errorbar(xs, ys, yerr=err if has_spread else None, marker="o", capsize=3, color=color, label=label,
                    linestyle="-" if len(xs) > 1 else "none")
        for ref_name, ref_fn, style in refs:
            pts = [(x, ref_fn(r)) for x, r in zip(xs, group, strict=True) if ref_fn(r) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=style, color=color, alpha=0.6,
                        marker=".", label=f"{ref_name} ({label})")
        for x, y, r, m, (lo, hi, kind) in zip(xs, ys, group, ms, spans, strict=True):
            why = busy_reason(r.get("load"))
            if why:
                busy += 1
                ax.plot([x], [y], marker="o", markersize=13, markerfacecolor="none", color="red")
            bound = nmp_bound(r) if y_metric == "nmp.speedup_over_host" else None
            reps.add(m.get("repeats"))
            rows.append([label, _fmt(x), _fmt(y), f"{_fmt(lo / y_scale)}–{_fmt(hi / y_scale)} ({kind})"
                         if m.get("repeats") else "deterministic", str(m.get("repeats", "1")), _load_text(r),
                         "; ".join(filter(None, [why and f"machine busy ({why})", bound]))])
    if ideal:
        ax.plot(sorted(all_x), sorted(all_x), color="grey", linestyle=":", label="ideal (= ranks per channel)")
    if min(ys_all) > 0 and max(ys_all) / min(ys_all) > 100:  # orders of magnitude apart: a log axis shows all
        ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.set_title(question, fontsize=9, loc="left")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    notes = []
    if single:
        notes.append(f"Single points: no configuration in these records was run at two values of {xlabel}; a "
                     f"sweep over {' / '.join(x_paths)} draws curves.")
    if busy:
        notes.append(f"Red rings: {busy} point(s) timed on a busy machine (see the table).")
    timed = {x for x in reps if x}
    how = (f"each point the median of its record's timed calls ({min(timed)}–{max(timed)}: see the table), error "
           "bars the spread" if len(timed) > 1 else f"each point the median of {timed.pop()} timed calls, error bars "
           "the spread" if timed else "deterministic (emulated or simulated: no repeats)")
    method = re.sub(r"\d+ timed calls after -?\d+ warm-up, ", "", _m(recs[-1], y_metric)["method"])  # counts: per point
    caption = f"{_machine(recs)} {ylabel}: {method}; {how}. " + " ".join(notes)
    return Figure(name, heading, fig, caption, head, rows)


def _x_swept(recs: list[dict], candidates: Sequence[str]) -> str | None:
    return next((p for p in candidates if len({json.dumps(_cfg(r, p)) for r in recs}) > 1), None)


def sweep_figures(records: list[dict]) -> list[Figure]:
    out = []
    look = [r for r in records if r.get("kind") == "lookup" and _m(r, "lookups_per_s")]
    for path, name, label in (("workload.pooling.mean", "lookups_vs_pooling", "mean pooling (lookups per bag)"),
                              ("workload.access.alpha", "lookups_vs_skew", "Zipf alpha (skew)")):
        recs = [r for r in look if _cfg(r, path) is not None]
        f = _line_figure(name, f"Throughput against {label}",
                         f"How does lookup throughput change with {label}?", recs, (path,),
                         lambda r, p=path: float(_cfg(r, p)), "lookups_per_s", 1e6, label, "M lookups/s")
        if f:
            out.append(f)
    cache = [r for r in records if r.get("kind") == "cache" and _m(r, "hit_rate") and _m(r, "capacity_rows")]
    if cache:
        x = _x_swept(cache, ("cache.capacity_fraction", "cache.capacity_rows", "cache.capacity_bytes")) \
            or "cache.capacity_fraction"

        def ref(name):
            return lambda r: (1 - _m(r, name)["value"] / _m(r, "lookups")["value"]
                              if _m(r, name) and _m(r, "lookups") and _m(r, "lookups")["value"] else None)

        f = _line_figure("hit_rate", "Cache hit rate against cache size", "How does the hit rate grow with the "
                         "cache? (dashed: Belady optimum; dotted: infinite cache)", cache,
                         ("cache.capacity_fraction", "cache.capacity_rows", "cache.capacity_bytes"),
                         lambda r: _m(r, "capacity_rows")["value"], "hit_rate", 1.0,
                         "cache capacity (rows, all tables)", "hit rate",
                         refs=[("Belady", ref("belady_misses"), "--"), ("compulsory", ref("compulsory_misses"), ":")],
                         logx=True, require_series=False)
        if f:
            f.caption += f" Swept: {x}."
            out.append(f)
    nmp = [r for r in records if r.get("kind") == "nmp" and _m(r, "nmp.speedup_over_host")]
    if nmp:
        def ranks(r):
            g = _cfg(r, "nmp.geometry", {})
            return g.get("dimms_per_channel", 1) * g.get("ranks_per_dimm", 1)

        f = _line_figure("nmp_ranks", "NMP speedup against ranks", "How does the NMP speedup scale with ranks "
                         "per channel?", nmp, ("nmp.geometry.dimms_per_channel", "nmp.geometry.ranks_per_dimm",
                                               "nmp.geometry.capacity_gib"),
                         ranks, "nmp.speedup_over_host", 1.0, "ranks per channel", "speedup over host (×)",
                         require_series=False, ideal=True)
        if f:
            out.append(f)
    return out


def plan_figures(records: list[dict]) -> list[Figure]:
    """How close each planner gets to the lower bound at each rank count, and how it loads the ranks at the
    largest count (per-rank compute + comms, one step line per planner)."""
    recs = [r for r in records if r.get("kind") == "plan" and r.get("metrics")]
    if not recs:
        return []
    latest = list(_latest(recs, lambda r: (r["optimizer"], r["config"]["plan"]["ranks"],
                                           r["config"]["plan"]["tables"], r["config"]["plan"]["hardware"])).values())
    p = latest[-1]["config"]["plan"]
    latest = [r for r in latest if (r["config"]["plan"]["tables"], r["config"]["plan"]["hardware"])
              == (p["tables"], p["hardware"])]
    planners = sorted({r["optimizer"] for r in latest})
    ranks = max(r["config"]["plan"]["ranks"] for r in latest)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.4))
    for i, opt in enumerate(planners):
        pts = sorted((r["config"]["plan"]["ranks"], _m(r, "ratio")["value"]) for r in latest if r["optimizer"] == opt)
        a1.plot([x for x, _ in pts], [y for _, y in pts], marker="os^v"[i % 4], color=f"C{i % 10}", label=opt,
                linestyle=["-", "--", ":", "-."][i % 4] if len(pts) > 1 else "none", markersize=8 - i % 4)
        r = next(r for r in latest if r["optimizer"] == opt and r["config"]["plan"]["ranks"] == ranks)
        per = {int(m["table"][4:]): m["value"] for m in r["metrics"] if m["name"] == "rank_compute_ms"}
        comm = {int(m["table"][4:]): m["value"] for m in r["metrics"] if m["name"] == "rank_comms_ms"}
        xs = sorted(per)
        a2.step(xs, [per[k] + comm.get(k, 0.0) for k in xs], where="mid", color=f"C{i % 10}", label=opt,
                linestyle=["-", "--", ":", "-."][i % 4], linewidth=2.5 - 0.4 * (i % 4))
    a1.set_xscale("log", base=2)
    a1.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a1.set_xlabel("ranks")
    a1.set_ylabel("predicted step cost / lower bound")
    a1.set_title(f"How close to the bound is each planner? {p['tables']} on {p['hardware']}", fontsize=9, loc="left")
    a2.set_xlabel(f"rank (of {ranks})")
    a2.set_ylabel("predicted compute + comms ms / iteration")
    a2.set_title(f"How evenly does each planner load {ranks} ranks?", fontsize=9, loc="left")
    for ax in (a1, a2):
        ax.grid(alpha=0.3)
    a2.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), title="equal lines overlap",
              title_fontsize=6)
    caption = (f"{_machine(latest)} Predicted, not measured: "
               + next(m["method"] for m in latest[0]["metrics"] if m["name"] == "cost_ms") + ".")
    head = ["planner", "ranks", "cost ms", "lower bound ms", "cost / bound", "busiest rank ms", "idlest rank ms"]
    rows = []
    for r in sorted(latest, key=lambda r: (r["optimizer"], r["config"]["plan"]["ranks"])):
        load = [m["value"] for m in r["metrics"] if m["name"] == "rank_compute_ms"]
        comm = [m["value"] for m in r["metrics"] if m["name"] == "rank_comms_ms"]
        tot = [a + b for a, b in zip(load, comm, strict=False)] or [0.0]
        rows.append([r["optimizer"], str(r["config"]["plan"]["ranks"]), _fmt(_m(r, "cost_ms")["value"]),
                     _fmt(_m(r, "lower_bound_ms")["value"]), f"{_m(r, 'ratio')['value']:.3f}", _fmt(max(tot)),
                     _fmt(min(tot))])
    return [Figure("plans", "Sharding plans: cost against the bound, load per rank", fig, caption, head, rows)]


def serving_figures(records: list[dict]) -> list[Figure]:
    """QPS against the bound's percentile latency, one line per (workload, server setting), each point one
    LoadGen run (serving/report.py draws it); the table lists every point."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    caption = plot_serving(records, [ax])
    if caption is None:
        plt.close(fig)
        return []
    head = ["workload", "setting", "offered QPS", "completed QPS", "p50 ms", "p99 ms", "verdict"]
    rows = []
    for r in records:
        p = r.get("point") if r.get("kind") == "serving" else None
        if not p:
            continue
        rows.append([r["workload"]["name"], str(r.get("setting", r.get("role", "run"))),
                     _fmt(p.get("target_qps", float("nan"))), _fmt(p.get("completed_qps", float("nan"))),
                     _fmt(p.get("p50_ms", float("nan"))), _fmt(p.get("p99_ms", float("nan"))),
                     str(r.get("verdict", "?"))])
    return [Figure("serving", "Serving: QPS against tail latency (MLPerf LoadGen)", fig, caption, head, rows)]


BUILDERS: list[tuple[str, Callable[[list[dict]], list[Figure]]]] = [
    ("Backends on one workload and mode", backend_figures),
    ("Sweeps (throughput against pooling and skew, hit rate, NMP)", sweep_figures),
    ("Per-rank plan comparison", plan_figures),
    ("Serving (MLPerf LoadGen)", serving_figures),
]


def figures(records: list[dict]) -> tuple[list[Figure], list[str]]:
    """All figures the records allow, and the headings of the sections they do not fill."""
    figs, empty = [], []
    for heading, fn in BUILDERS:
        got = fn(records)
        figs += got
        if not got:
            empty.append(heading)
    return figs, empty


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    cell = lambda s: str(s).replace("|", "/").replace("\n", " ")  # noqa: E731
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows])


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table border='1' cellspacing='0' cellpadding='3'><tr>{th}</tr>{trs}</table>"


def build_report(records: list[dict], out_dir: str | os.PathLike, title: str = "dlrmbench report") -> Path:
    """Write report.md, report.html and the PNGs into a temp folder, then move it to out_dir (replacing it)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / "report.md").is_file():
        raise ValueError(f"{out_dir} exists and is not a dlrmbench report folder; choose another --out")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        os.chmod(tmp, umask_mode(0o777))  # mkdtemp makes 0700; the report is the user's like any folder
        figs, empty = figures(records)
        intro = (f"{len(records)} records, runs: {len({r.get('run_id') for r in records})}, git: "
                 f"{', '.join(sorted({str(r.get('git_sha', '?'))[:12] for r in records}))}")
        md = [f"# {title}", "", intro, ""]
        body = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(intro)}</p>"]
        for f in figs:
            try:
                width = f.fig.get_size_inches()[0]
                f.fig.text(0.0, 0.0, "\n".join(textwrap.wrap(f.caption, int(width * 19))), fontsize=6.5,
                           va="top", ha="left", transform=f.fig.transFigure)
                f.fig.tight_layout()
                f.fig.savefig(tmp / f"{f.name}.png", dpi=90, bbox_inches="tight")
            finally:
                plt.close(f.fig)
            md += [f"## {f.heading}", "", f"![{f.heading}]({f.name}.png)", "", f.caption, "",
                   _md_table(f.head, f.rows), ""]
            body += [f"<h2>{html.escape(f.heading)}</h2>", f'<img src="{f.name}.png" alt="{html.escape(f.heading)}">',
                     f"<p><small>{html.escape(f.caption)}</small></p>", _html_table(f.head, f.rows)]
        for heading in empty:
            md += [f"## {heading}", "", "_No records with this data in the files given._", ""]
            body += [f"<h2>{html.escape(heading)}</h2><p><i>no records with this data</i></p>"]
        (tmp / "report.md").write_text("\n".join(md) + "\n")
        (tmp / "report.html").write_text("<!doctype html><meta charset='utf-8'><title>" + html.escape(title)
                                         + "</title><body style='font-family:sans-serif;max-width:1300px'>"
                                         + "\n".join(body) + "</body>\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out_dir / "report.md"


def main(argv: list[str]) -> int:
    ap = OneLineParser(prog="dlrmbench report", description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", help="records JSONL files (run, sweep, plan records)")
    ap.add_argument("--out", default="results/report", help="folder for report.md, report.html, *.png")
    ap.add_argument("--title", default="dlrmbench report")
    args = ap.parse_args(argv)
    try:
        check_output_dir(args.out, "--out")
        path = build_report(load(args.records), args.out, args.title)
    except ValueError as e:
        print(f"dlrmbench report: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path} and {path.with_suffix('.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
