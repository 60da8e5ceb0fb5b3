"""Why an NMP speedup is below 1, from an `nmp` record's own figures: the emulator's lower bound on the NMP batch
(`nmp.speedup_bound`, embedding/nmp/bounds.py: data bus, C/A bus, rank data path, bank timing, partial-sum
return, whichever binds) and the ranks that hold table rows (`nmp.ranks_with_data`).

When that bound itself is near 1 the configuration cannot do better (e.g. one rank per channel: NMP reads through
the same number of data paths as the host); otherwise NMP missed its own bound because too few packets were in
flight to keep its ranks busy (latency-bound).
"""
from __future__ import annotations

import math

__all__ = ["nmp_bound"]


def _metric(rec: dict, name: str) -> dict | None:
    return next((m for m in rec.get("metrics", []) if m["name"] == name and "table" not in m), None)


def _value(rec: dict, name: str) -> float | None:
    m = _metric(rec, name)
    return None if m is None else float(m["value"])


def nmp_bound(rec: dict) -> str | None:
    """One line naming the bound that holds an NMP speedup below 1, with its numbers; None when ≥ 1 or unknown."""
    speedup, cap = _value(rec, "nmp.speedup_over_host"), _value(rec, "nmp.speedup_bound")
    if speedup is None or speedup >= 1 or cap is None:
        return None
    nmp = rec.get("config", {}).get("nmp", {})
    g = nmp.get("geometry", {})
    total = g.get("channels", 4) * g.get("dimms_per_channel", 1) * g.get("ranks_per_dimm", 2)
    used = _value(rec, "nmp.ranks_with_data")
    ranks = f"{used:.0f} of {total} ranks hold table rows" if used is not None else f"{total} ranks"
    head = f"speedup {speedup:.2f}× < 1"
    m = _metric(rec, "nmp.speedup_bound")
    term = f"NMP bound by the {m.get('nmp_bound_by', '?')}, host by the {m.get('host_bound_by', '?')}"
    if cap < 1.5:
        return f"{head}: the configuration's own bound is {cap:.2f}× ({term}; {ranks}): NMP cannot do much better here"
    w = rec.get("workload", {})
    mode = nmp.get("mode", "recnmp")
    nmp_ns, latency = _value(rec, f"{mode}.batch_latency"), _value(rec, "nmp.packet_latency")
    packets = math.ceil(w.get("batch_size", 0) * w.get("tables", 1) / max(nmp.get("packet_poolings", 16), 1))
    flight = (f"; {packets} packets per batch of {latency:,.0f} ns each keep {packets * latency / nmp_ns:.1f} in "
              f"flight on average" if latency and nmp_ns else "")
    return f"{head}: latency-bound — its bound is {cap:.2f}× ({term}; {ranks}) but too few packets overlap{flight}"
