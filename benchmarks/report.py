"""`dlrmbench report RECORDS.jsonl... --out DIR`: a markdown and HTML report with PNG plots (matplotlib, Agg).

Plots, each drawn only when the records hold its data, each captioned with machine, versions and method:
throughput and GB/s by backend and workload; throughput against pooling and skew; hit rate against cache size
(with Belady and compulsory references); per-rank plan comparison; NMP speedup against ranks.
Bad input (missing file, no records): one line on stderr, exit 2, nothing written.
"""
from __future__ import annotations

import argparse
import html
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from serving.report import plot_serving  # noqa: E402

from .records import read_records  # noqa: E402

__all__ = ["load", "build_report", "main"]

Plot = Callable[[list[dict], plt.Axes], str | None]


def load(paths: Sequence[str]) -> list[dict]:
    records = []
    for p in paths:
        if not Path(p).is_file():
            raise ValueError(f"records file {p} does not exist")
        try:
            records += read_records(p)
        except ValueError as e:
            raise ValueError(f"{p}: not JSON lines ({e})") from None
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


def _caption(recs: list[dict], method: str) -> str:
    envs = {(e.get("cpu"), e.get("gpu"), e.get("torch"), e.get("fbgemm_gpu"), e.get("torchrec"), e.get("host"))
            for e in (r.get("env", {}) for r in recs)}
    machine = "; ".join(f"{cpu}{' + ' + gpu if gpu else ''} ({host}), torch {t}, fbgemm {f}, torchrec {tr}"
                        for cpu, gpu, t, f, tr, host in sorted(envs, key=str))
    return f"Machine: {machine}. Method: {method}"


def _bars(ax: plt.Axes, groups: dict[str, dict[str, float]], ylabel: str) -> None:
    labels = sorted({k for g in groups.values() for k in g})
    width = 0.8 / max(len(groups), 1)
    for i, (series, vals) in enumerate(sorted(groups.items())):
        ax.bar([j + i * width for j in range(len(labels))], [vals.get(k, 0.0) for k in labels], width, label=series)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))], labels, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)


def _workload_label(w: dict) -> str:
    """Name plus what a sweep may have changed under the same name: lookups per sample, row cap, mode."""
    cap = f"\nrows ≤ {w['row_cap']:,}" if w.get("row_cap") else ""
    return f"{w['name']}\nL={w['lookups_per_sample']:g}{cap}\n{w.get('mode', 'inference')}"


def plot_backends(records: list[dict], axes: list[plt.Axes]) -> str | None:
    recs = [r for r in records if r["kind"] == "lookup" and _m(r, "samples_per_s")]
    if not recs:
        return None
    for ax, (name, label) in zip(axes, [("samples_per_s", "samples/s"), ("effective_bw", "effective GB/s")],
                                 strict=True):
        groups: dict[str, dict[str, float]] = defaultdict(dict)
        for r in recs:  # the latest record of each (backend, workload shape) wins: records are in time order
            groups[f"{r['backend']} {r.get('precision', '')}"][_workload_label(r["workload"])] = _m(r, name)["value"]
        _bars(ax, groups, label)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(f"{label} by backend and workload (median of timed calls)", fontsize=9)
    return _caption(recs, _m(recs[-1], "effective_bw")["method"])


def plot_pooling_skew(records: list[dict], axes: list[plt.Axes]) -> str | None:
    recs = [r for r in records if r["kind"] == "lookup" and _m(r, "lookups_per_s")
            and _cfg(r, "workload.pooling.mean") is not None]
    keys = {(_cfg(r, "workload.pooling.mean"), _cfg(r, "workload.access.alpha")) for r in recs}
    if len(keys) < 2:
        return None
    for ax, (x, series, xlabel) in zip(axes, [("pooling.mean", "access.alpha", "mean pooling (lookups per bag)"),
                                              ("access.alpha", "pooling.mean", "Zipf alpha (skew)")], strict=True):
        lines: dict[str, dict[float, float]] = defaultdict(dict)
        for r in recs:
            lines[f"{r['backend']} {series.split('.')[-1]}={_cfg(r, 'workload.' + series)}"][
                float(_cfg(r, "workload." + x))] = _m(r, "lookups_per_s")["value"] / 1e6
        for label, pts in sorted(lines.items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[v] for v in xs], marker="o", label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("M lookups/s")
        ax.legend(fontsize=7)
    axes[0].set_title("throughput against pooling and skew", fontsize=9)
    return _caption(recs, _m(recs[-1], "lookups_per_s")["method"])


def plot_hit_rate(records: list[dict], axes: list[plt.Axes]) -> str | None:
    recs = [r for r in records if r["kind"] == "cache" and _m(r, "hit_rate") and _m(r, "capacity_rows")]
    if not recs:
        return None
    ax = axes[0]
    lines: dict[str, dict[float, float]] = defaultdict(dict)
    for r in recs:
        cap, look = _m(r, "capacity_rows")["value"], _m(r, "lookups")
        alpha = _cfg(r, "workload.access.alpha")
        tag = f"{r['workload']['name']} α={alpha}"
        lines[f"{_cfg(r, 'cache.policy')} {tag}"][cap] = _m(r, "hit_rate")["value"]
        for ref in ("belady_misses", "compulsory_misses"):
            if _m(r, ref) and look:
                lines[f"{ref.split('_')[0]} {tag}"][cap] = 1 - _m(r, ref)["value"] / look["value"]
    for label, pts in sorted(lines.items()):
        xs = sorted(pts)
        ax.plot(xs, [pts[v] for v in xs], marker="o", linestyle="--" if label.startswith(("belady", "compulsory"))
                else "-", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("cache capacity (rows, all tables)")
    ax.set_ylabel("hit rate")
    ax.set_title("hit rate against cache size (dashed: Belady optimum, infinite cache)", fontsize=9)
    ax.legend(fontsize=7)
    return _caption(recs, _m(recs[-1], "hit_rate")["method"])


def plot_plans(records: list[dict], axes: list[plt.Axes]) -> str | None:
    recs = [r for r in records if r["kind"] == "plan" and r.get("metrics")]
    if not recs:
        return None
    ranks = max(r["config"]["plan"]["ranks"] for r in recs)
    recs = [r for r in recs if r["config"]["plan"]["ranks"] == ranks]
    ax = axes[0]
    width = 0.8 / len(recs)
    for i, r in enumerate(recs):
        per = {m["table"]: m["value"] for m in r["metrics"] if m["name"] == "rank_compute_ms"}
        comm = {m["table"]: m["value"] for m in r["metrics"] if m["name"] == "rank_comms_ms"}
        xs = [int(k[4:]) + i * width for k in per]
        ax.bar(xs, list(per.values()), width, label=f"{r['optimizer']} compute")
        ax.bar(xs, [comm[k] for k in per], width, bottom=list(per.values()), alpha=0.5,
               label=f"{r['optimizer']} comms")
    ax.set_xlabel("rank")
    ax.set_ylabel("predicted ms / iteration")
    p = recs[0]["config"]["plan"]
    ax.set_title(f"per-rank plan comparison: {p['tables']} on {p['hardware']}, {ranks} ranks", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    return _caption(recs, next(m["method"] for m in recs[0]["metrics"] if m["name"] == "cost_ms"))


def plot_nmp(records: list[dict], axes: list[plt.Axes]) -> str | None:
    recs = [r for r in records if r["kind"] == "nmp" and _m(r, "nmp.speedup_over_host")]
    if not recs:
        return None
    lines: dict[str, dict[int, float]] = defaultdict(dict)
    for r in recs:
        g = _cfg(r, "nmp.geometry", {})
        ranks = g.get("dimms_per_channel", 1) * g.get("ranks_per_dimm", 1)
        label = f"{_cfg(r, 'nmp.mode')} {_cfg(r, 'nmp.mapping')} RankCache {_cfg(r, 'nmp.rankcache_bytes', 0)} B"
        lines[label][ranks] = _m(r, "nmp.speedup_over_host")["value"]
    ax = axes[0]
    for label, pts in sorted(lines.items()):
        xs = sorted(pts)
        ax.plot(xs, [pts[v] for v in xs], marker="o", label=label)
    xs = sorted({x for pts in lines.values() for x in pts})
    ax.plot(xs, xs, color="grey", linestyle=":", label="ideal (= ranks)")
    ax.set_xlabel("ranks per channel")
    ax.set_ylabel("speedup over host (emulated cycles)")
    ax.set_title("NMP speedup against ranks", fontsize=9)
    ax.legend(fontsize=7)
    return _caption(recs, _m(recs[-1], "nmp.speedup_over_host")["method"])


PLOTS: list[tuple[str, str, int, Callable]] = [
    ("backends", "Throughput and bandwidth by backend and workload", 2, plot_backends),
    ("pooling_skew", "Throughput against pooling and skew", 2, plot_pooling_skew),
    ("hit_rate", "Cache hit rate against cache size", 1, plot_hit_rate),
    ("plans", "Per-rank plan comparison", 1, plot_plans),
    ("nmp_ranks", "NMP speedup against ranks", 1, plot_nmp),
    ("serving", "Serving: QPS against tail latency (MLPerf LoadGen)", 1, plot_serving),
]


def build_report(records: list[dict], out_dir: str | os.PathLike, title: str = "dlrmbench report") -> Path:
    """Write report.md, report.html and the PNGs into a temp folder, then move it to out_dir (replacing it)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / "report.md").is_file():
        raise ValueError(f"{out_dir} exists and is not a dlrmbench report folder; choose another --out")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        md = [f"# {title}", "", f"{len(records)} records, runs: {len({r.get('run_id') for r in records})}, "
              f"git: {', '.join(sorted({str(r.get('git_sha', '?'))[:12] for r in records}))}", ""]
        body = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(md[2])}</p>"]
        for name, heading, panels, fn in PLOTS:
            fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.2), squeeze=False)
            try:
                caption = fn(records, list(axes[0]))
                if caption is None:
                    md += [f"## {heading}", "", "_No records with this data; see the example sweeps in conf/sweep/._", ""]
                    body += [f"<h2>{html.escape(heading)}</h2><p><i>no records with this data</i></p>"]
                    continue
                fig.text(0.01, 0.005, caption[:260], fontsize=6, wrap=True)
                fig.tight_layout(rect=(0, 0.06, 1, 1))
                fig.savefig(tmp / f"{name}.png", dpi=90)
            finally:
                plt.close(fig)
            md += [f"## {heading}", "", f"![{heading}]({name}.png)", "", caption, ""]
            body += [f"<h2>{html.escape(heading)}</h2>", f'<img src="{name}.png" alt="{html.escape(heading)}">',
                     f"<p><small>{html.escape(caption)}</small></p>"]
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
    ap = argparse.ArgumentParser(prog="dlrmbench report", description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", help="records JSONL files (run, sweep, plan records)")
    ap.add_argument("--out", default="results/report", help="folder for report.md, report.html, *.png")
    ap.add_argument("--title", default="dlrmbench report")
    args = ap.parse_args(argv)
    try:
        path = build_report(load(args.records), args.out, args.title)
    except ValueError as e:
        print(f"dlrmbench report: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path} and {path.with_suffix('.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
