"""The readable table printed at the end of a run, with the lines that say when its ranking cannot be trusted."""
from __future__ import annotations

from .nmp_bound import nmp_bound
from .trust import trust_notes

__all__ = ["print_table", "format_table"]

_COLUMNS = [("batch_time", "ms/batch", "{:.3f}"), ("samples_per_s", "samples/s", "{:,.0f}"),
            ("lookups_per_s", "Mlookups/s", None), ("effective_bw", "GB/s", "{:.2f}"), ("rows_bw", "rows GB/s",
                                                                                          "{:.2f}"),
            ("ratio_to_gather", "× gather", "{:.2f}")]


def _get(rec: dict, name: str):
    return next((m for m in rec["metrics"] if m["name"] == name), None)


def format_table(records: list[dict]) -> str:
    lines = []
    w = records[0]["workload"]
    cap = f", rows capped at {w['row_cap']} ({len(w['capped_tables'])} tables)" if w.get("row_cap") else ""
    lines.append(f"workload {w['name']}: {w['tables']} tables, batch {w['batch_size']}, {w['mode']}, "
                 f"{w['lookups_per_sample']:.1f} lookups/sample, {w['table_bytes'] / 2**20:.1f} MiB of tables{cap}")
    head = ["backend", "precision"] + [c[1] for c in _COLUMNS] + ["p90 ms", "IQR %"]
    rows, timed = [], []
    for r in records:
        if r["kind"] not in ("lookup", "model"):
            continue
        label = r["backend"] if r["kind"] == "lookup" else f"{r['backend']} (DLRM step)"
        row = [label, r["precision"]]
        t = _get(r, "batch_time") or _get(r, "model_step_time")
        for name, _, fmt in _COLUMNS:
            m = t if name == "batch_time" else _get(r, name if name != "samples_per_s" or r["kind"] == "lookup"
                                                     else "model_samples_per_s")
            if m is None:
                row.append("")
            elif fmt is None:
                row.append(f"{m['value'] / 1e6:.1f}")
            else:
                row.append(fmt.format(m["value"]))
        row.append(f"{t['p90']:.3f}" if t else "")
        row.append(f"{100 * t['rel_iqr']:.1f}" if t and "rel_iqr" in t else "")
        rows.append(row)
        if t and r["kind"] == "lookup":
            timed.append((label, t, r.get("load")))
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=False)]
    fmt_row = lambda r: "  ".join(x.rjust(n) if i else x.ljust(n) for i, (x, n) in enumerate(zip(r, widths, strict=True)))  # noqa: E731
    if rows:
        lines += [fmt_row(head), fmt_row(["-" * n for n in widths])] + [fmt_row(r) for r in rows]
        lines += trust_notes(timed)
        lines.append("ms/batch: median time per batch; IQR %: interquartile range of the timed calls / median; "
                     "GB/s: rows + indices + offsets + outputs moved / time (formula in each record); × gather: "
                     "rows GB/s / gather_workload_bw (index_select of the same rows) measured in this run")
        loads = [x[2] for x in timed if x[2]]
        if loads:
            lines.append(f"load average while timing: {min(x['loadavg_before'] for x in loads):.1f}–"
                         f"{max(max(x['loadavg_before'], x['loadavg_after']) for x in loads):.1f} on "
                         f"{loads[0]['cpus']} cores")
    for r in records:
        if r["kind"] in ("ceiling", "generation", "overhead"):
            for m in r["metrics"]:
                v = m["value"]
                val = (f"{v / 1e6:.1f} M{m['unit']}" if m["unit"] == "indices/s"
                       else f"{v:.2g} {m['unit']}" if 0 < abs(v) < 0.1 else f"{v:.2f} {m['unit']}")
                lines.append(f"{m['name']:>18}: {val}  ({m['method']})")
    for r in records:
        if r["kind"] in ("cache", "nmp"):
            lines.append(f"{r['kind']} (overall; per-table figures are in the record):")
            for m in r["metrics"]:
                if "table" not in m:
                    v = m["value"]
                    val = f"{int(v):,}" if float(v).is_integer() and abs(v) < 1e15 else f"{v:,.4g}"
                    lines.append(f"  {m['name']:>32}: {val} {m['unit']}")
            why = nmp_bound(r) if r["kind"] == "nmp" else None
            if why:
                lines.append(f"  why: {why}")
    return "\n".join(lines)


def print_table(records: list[dict]) -> None:
    print(format_table(records))
