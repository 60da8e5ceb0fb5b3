"""QPS–latency plots of serving records: a PNG per search (one curve per server setting) and a panel for
`dlrmbench report`; each point one LoadGen run, the bound as a line; captions say how the points were obtained."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_qps_latency", "plot_serving"]


def plot_qps_latency(curves: dict[str, list[tuple[float, float, bool]]], bound_ms: float, percentile: float,
                     title: str, caption: str, path: str | Path) -> Path:
    """curves: label → [(achieved QPS, latency at the bound's percentile in ms, VALID)]; hollow markers INVALID."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, (label, pts) in enumerate(sorted(curves.items())):
        pts = sorted(pts)
        color = f"C{i % 10}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color=color, alpha=0.5, label=label)
        for q, lat, ok in pts:
            ax.plot(q, lat, "o", color=color, mfc=color if ok else "none")
    ax.axhline(bound_ms, color="k", ls="--", lw=1, label=f"bound p{percentile:g} ≤ {bound_ms:g} ms")
    ax.set_xlabel("completed queries/s (LoadGen)")
    ax.set_ylabel(f"p{percentile:g} latency (ms, LoadGen)")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    fig.text(0.01, 0.01, caption, fontsize=6.5, wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_serving(records: list[dict], axes: list) -> str | None:
    """`dlrmbench report` panel: achieved QPS against the bound's percentile latency for every serving record,
    one line per (workload, setting); None when there are no serving records."""
    curves: dict[str, list] = defaultdict(list)
    loads, bounds = [], set()
    for r in records:
        if r.get("kind") != "serving" or "point" not in r:
            continue
        lg_cfg = r["config"]["serving"]["loadgen"]
        p, key = r["point"], f"p{lg_cfg['percentile']:g}_ms"
        if key not in p or "completed_qps" not in p:
            continue
        label = f"{r['workload']['name']}: {r.get('setting', r.get('role', 'run'))} (p{lg_cfg['percentile']:g})"
        curves[label].append((p["completed_qps"], p[key], r.get("verdict") == "VALID"))
        loads.append(r["loadavg"][0])
        bounds.add((lg_cfg["latency_ms"], lg_cfg["percentile"]))
    if not curves:
        return None
    ax = axes[0]
    for i, (label, pts) in enumerate(sorted(curves.items())[:20]):
        pts = sorted(pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, color=f"C{i % 10}", label=label)
    for b, _ in sorted(bounds):
        ax.axhline(b, color="k", ls="--", lw=0.8)
    ax.set_xlabel("completed queries/s")
    ax.set_ylabel("latency at the bound's percentile (ms)")
    ax.set_yscale("log")
    ax.legend(fontsize=6)
    return (f"each point one MLPerf LoadGen run (percentiles from its summary log); dashed: latency bounds; shared "
            f"2-core machine, load average {min(loads):.1f}–{max(loads):.1f}")
