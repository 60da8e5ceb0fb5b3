"""QPS–latency plots of serving records: one PNG per setting group (naive, static, ours), each point one LoadGen
run, the bound as a line; captions say how the points were obtained."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_qps_latency", "serving_plots"]


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


def serving_plots(records: list[dict], out_dir: str | Path) -> list[Path]:
    """For `dlrmbench report`: one QPS–latency PNG per (workload, serving preset) found among serving records."""
    groups: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    meta: dict[tuple, tuple[float, float, list]] = {}
    for r in records:
        if r.get("kind") != "serving" or "point" not in r:
            continue
        lg_cfg = r["config"]["serving"]["loadgen"]
        key = (r["workload"]["name"], r["config"]["serving"]["name"])
        pkey = f"p{lg_cfg['percentile']:g}_ms"
        p = r["point"]
        if pkey not in p or "completed_qps" not in p:
            continue
        groups[key][r.get("setting", r.get("role", "run"))].append((p["completed_qps"], p[pkey],
                                                                    r.get("verdict") == "VALID"))
        meta.setdefault(key, (lg_cfg["latency_ms"], lg_cfg["percentile"], []))[2].append(r["loadavg"][0])
    out = []
    for key, curves in groups.items():
        bound, pct, loads = meta[key]
        caption = (f"each point one MLPerf LoadGen Server run (latency from its summary log); filled = VALID; "
                   f"shared 2-core machine, load average {min(loads):.1f}–{max(loads):.1f} during the runs")
        out.append(plot_qps_latency(curves, bound, pct, f"{key[0]} / {key[1]}: QPS vs p{pct:g}", caption,
                                    Path(out_dir) / f"serving_{key[0]}_{key[1]}.png"))
    return out
