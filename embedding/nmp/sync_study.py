"""Where a packet's time goes under each packet_sync mode, from the detailed model's own per-lookup counters.

A packet p of a channel runs from the barrier of p − 1 (every rank done with p − 1, + 1 cycle for the DIMM add) to
its own barrier. Its duration splits, on the rank that finished last (the slowest), into

- fill: barrier of p − 1 → the packet's first data beat on any rank (≥ tRCD + tCL under strict sync: every row of
  p must be opened after the barrier; negative when ranks run ahead, as with packet_sync=off);
- work: the slowest rank's data beats, bursts × tBL;
- drain: bubbles among the slowest rank's last `queue_entries` reads, when its FR-FCFS queue runs dry and bank
  conflicts can no longer be hidden behind other requests (the tail of each packet);
- steady bubbles: the slowest rank's other gaps (bank conflicts, tRC / tFAW, with a full queue);
- and, beside them, how long the average rank idles waiting for the slowest (the barrier's cost to the others)
  and the spread of rank work (max − mean bursts × tBL: load imbalance).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedding.nmp.config import NmpConfig
from embedding.nmp.dram import map_lookups
from embedding.nmp.execute import LookupStream, RankCache, emulate_host, emulate_nmp

__all__ = ["PacketBreakdown", "packet_breakdown"]


@dataclass(frozen=True)
class PacketBreakdown:
    """Per-packet means over every channel's packets (cycles), and the batch's speedup."""

    sync: str
    speedup: float
    packets: int
    duration: float
    fill: float
    work: float
    drain: float
    steady_bubbles: float
    idle_others: float
    imbalance: float


def packet_breakdown(cfg: NmpConfig, stream: LookupStream) -> PacketBreakdown:
    """Emulate the batch in detail (RecNMP, no RankCache) and split its packets' time (see the module doc)."""
    g = cfg.geometry
    d = map_lookups(cfg, stream.tables, stream.rows, stream.table_rows, stream.row_bytes)
    host = emulate_host(cfg, d, stream.poolings).cycles
    tr: dict = {}
    res = emulate_nmp(cfg, d, stream.tables, stream.poolings, stream.row_bytes, RankCache(g.total_ranks, 0), tr)
    tbl, rpc, q = cfg.timings.tBL, g.ranks_per_channel, cfg.queue_entries
    n_packets = int(tr["packet_base"][-1])
    grp = tr["packet"] * rpc + tr["rank"]
    fin, beats = tr["finish"], tr["bursts"] * tbl
    order = np.lexsort((fin, grp))  # each (packet, rank) group's reads in finishing order
    starts = np.searchsorted(grp[order], np.arange(n_packets * rpc + 1))
    last = np.full(n_packets * rpc, -1, np.int64)
    first = np.full(n_packets * rpc, np.iinfo(np.int64).max)
    np.maximum.at(last, grp, fin)
    np.minimum.at(first, grp, fin - beats)
    work = np.bincount(grp, weights=beats, minlength=n_packets * rpc)
    drain = np.zeros(n_packets * rpc)
    for k in np.flatnonzero(starts[1:] - starts[:-1] > q):  # the last q reads of a group, span − their beats
        tail = order[starts[k + 1] - q:starts[k + 1]]
        lead = order[starts[k + 1] - q - 1]
        drain[k] = fin[tail].max() - fin[lead] - beats[tail].sum()
    last, first, work, drain = (a.reshape(n_packets, rpc) for a in (last, first, work, drain))
    fills, durs, slow_work, slow_drain, slow_steady, idle, imb = ([] for _ in range(7))
    for c in range(g.channels):
        p0, p1 = tr["packet_base"][c], tr["packet_base"][c + 1]
        if p1 == p0:
            continue
        lst, fst, wk, dr = last[p0:p1], first[p0:p1], work[p0:p1], drain[p0:p1]
        barrier = lst.max(axis=1) + 1
        prev = np.concatenate(([0], barrier[:-1]))
        slow = np.arange(p1 - p0), lst.argmax(axis=1)
        span = lst[slow] - fst[slow]
        durs.append(barrier - prev)
        fills.append(fst.min(axis=1) - prev)
        slow_work.append(wk[slow])
        slow_drain.append(dr[slow])
        slow_steady.append(span - wk[slow] - dr[slow])
        idle.append((lst.max(axis=1)[:, None] - lst).mean(axis=1))
        imb.append(wk.max(axis=1) - wk.mean(axis=1))
    mean = lambda parts: float(np.concatenate(parts).mean())  # noqa: E731
    return PacketBreakdown(cfg.packet_sync, host / res.cycles, n_packets, mean(durs), mean(fills), mean(slow_work),
                           mean(slow_drain), mean(slow_steady), mean(idle), mean(imb))
