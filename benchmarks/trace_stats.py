"""`dlrmbench trace stats FILE [--json]`: a trace's locality as labelled tables for people, or JSON for machines.

The figures are embedding.traces.trace_statistics's: per table and overall, lookups, distinct keys, unique
fraction, the share of lookups taken by the hottest 1% of keys, and the reuse histogram (keys by how often they
were looked up, in log2 bins, here labelled with their ranges).
"""
from __future__ import annotations

__all__ = ["stats_dict", "format_stats", "bin_label"]

MAX_TABLE_ROWS = 40
"""Tables listed one per line in the text output; the rest are counted (--json has them all)."""


def stats_dict(path: str, trace) -> dict:
    """The machine-readable statistics of a loaded trace (embedding.batch.Batch)."""
    from embedding.traces import rows_per_table, trace_statistics

    stats = trace_statistics([trace], trace.num_tables)
    return {"file": path, "tables": trace.num_tables, "batch_size": trace.batch_size,
            "rows_per_table": rows_per_table(trace).tolist(), **stats}


def bin_label(i: int) -> str:
    """Bin i of a log2 reuse histogram: keys looked up [2^i, 2^(i+1)) times, e.g. '1', '2–3', '4–7'."""
    lo, hi = 2**i, 2 ** (i + 1) - 1
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    line = lambda r: "  ".join(x.ljust(n) if i == 0 else x.rjust(n) for i, (x, n) in enumerate(zip(r, widths, strict=True)))  # noqa: E731
    return [line(head), line(["-" * n for n in widths]), *(line(r) for r in rows)]


def _row(name: str, rows: int | str, s: dict) -> list[str]:
    return [name, f"{rows:,}" if isinstance(rows, int) else rows, f"{s['lookups']:,}", f"{s['unique']:,}",
            f"{100 * s['unique_fraction']:.1f}", f"{100 * s['hot1pct_share']:.1f}"]


def format_stats(d: dict) -> str:
    """Labelled text: a header line, one row per table (and all tables), the overall reuse histogram."""
    o = d["overall"]
    out = [f"trace {d['file']}: {d['tables']} tables, {d['batch_size']:,} samples, {o['lookups']:,} lookups", ""]
    per = d["per_table"]
    rows = [_row(str(t), d["rows_per_table"][t], s) for t, s in enumerate(per[:MAX_TABLE_ROWS])]
    rows.append(_row("all", f"{sum(d['rows_per_table']):,}", o))
    out += _table(["table", "rows (max index + 1)", "lookups", "distinct keys", "unique %", "hot 1% share %"], rows)
    if len(per) > MAX_TABLE_ROWS:
        out.append(f"({len(per) - MAX_TABLE_ROWS} more tables not listed; --json lists every table)")
    hist = o["reuse_histogram"]
    if hist:
        keys = max(sum(hist), 1)
        out += ["", "reuse histogram, all tables: distinct keys by how many times each was looked up"]
        out += _table(["looked up (times)", "keys", "% of keys"],
                      [[bin_label(i), f"{n:,}", f"{100 * n / keys:.1f}"] for i, n in enumerate(hist)])
    out += ["", "unique %: distinct keys / lookups; hot 1% share: lookups taken by the hottest 1% of distinct keys; "
            "keys are (table, row)"]
    return "\n".join(out)
