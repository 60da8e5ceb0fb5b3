"""Why an NMP speedup is below 1: the bound, computed from an `nmp` record's own emulator outputs and config.

Both the host and the NMP ranks read the same bytes out of the DRAM arrays (`*.dram_internal_bytes`). The host
moves them over `channels` data buses; NMP reads them inside the ranks that hold the tables, each rank's bus at the
same burst rate (64 B per tBL cycles). So NMP's batch time is at least bytes / (ranks used × burst rate), and its
speedup at most host batch time / that. When that cap is near 1 the bound is the ranks' read bandwidth (too few
ranks hold tables: page colouring puts a table in one rank); otherwise NMP missed its own bound because too few
packets were in flight to keep its ranks busy (latency-bound).
"""
from __future__ import annotations

import math

__all__ = ["nmp_bound"]

BURST_BYTES = 64


def _value(rec: dict, name: str) -> float | None:
    m = next((m for m in rec.get("metrics", []) if m["name"] == name and "table" not in m), None)
    return None if m is None else float(m["value"])


def nmp_bound(rec: dict) -> str | None:
    """One line naming the bound that holds an NMP speedup below 1, with its numbers; None when ≥ 1 or unknown."""
    speedup = _value(rec, "nmp.speedup_over_host")
    nmp = rec.get("config", {}).get("nmp", {})
    mode = nmp.get("mode", "recnmp")
    host_ns, nmp_ns = _value(rec, "host.batch_latency"), _value(rec, f"{mode}.batch_latency")
    dram = _value(rec, f"{mode}.dram_internal_bytes")
    w = rec.get("workload", {})
    if speedup is None or speedup >= 1 or None in (host_ns, nmp_ns, dram) or not w.get("num_batches"):
        return None
    g, t = nmp.get("geometry", {}), nmp.get("timings", {})
    channels = g.get("channels", 4)
    total = channels * g.get("dimms_per_channel", 1) * g.get("ranks_per_dimm", 2)
    tables = w.get("tables", total)
    used = min(tables, total) if nmp.get("mapping") == "page_colour" else total
    bus = BURST_BYTES * t.get("clock_mhz", 1200.0) / 1e3 / t.get("tBL", 4)  # GB/s of one data bus (B/ns)
    per_batch = dram / w["num_batches"]
    rank_bound_ns = per_batch / (used * bus)
    cap = host_ns / rank_bound_ns
    head = f"speedup {speedup:.2f}× < 1"
    if cap < 1.5:
        colour = (f"{tables} tables page-coloured onto {total} ranks" if nmp.get("mapping") == "page_colour"
                  else f"all {total} ranks")
        return (f"{head}: bound by DRAM reads — both read {per_batch / 1e6:.2f} MB per batch; NMP reads it in "
                f"{used} ranks ({colour}) × {bus:.1f} GB/s = {used * bus:.1f} GB/s against the host's {channels} "
                f"channels × {bus:.1f} GB/s = {channels * bus:.1f} GB/s, so at most {cap:.2f}× (host "
                f"{host_ns:,.0f} ns, NMP {nmp_ns:,.0f} ns per batch, its bound {rank_bound_ns:,.0f} ns)")
    packets = math.ceil(w.get("batch_size", 0) * tables / max(nmp.get("packet_poolings", 16), 1))
    latency = _value(rec, "nmp.packet_latency")
    flight = (f"; {packets} packets per batch of {latency:,.0f} ns each (nmp.packet_latency) keep "
              f"{packets * latency / nmp_ns:.1f} in flight on average for {used} ranks" if latency else "")
    return (f"{head}: latency-bound — NMP reached {rank_bound_ns / nmp_ns:.0%} of its {used} ranks' read "
            f"bandwidth ({nmp_ns:,.0f} ns per batch against a {rank_bound_ns:,.0f} ns bound; cap {cap:.1f}×){flight}")
