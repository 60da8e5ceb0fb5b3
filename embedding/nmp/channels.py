"""All channels of one batch in one numba call, in parallel: channels share no DRAM state, bus or queue, so each
runs its own scheduler (timing.py) on its own thread and the batch ends when the slowest channel ends.

Results do not depend on the thread count: every channel writes only its own slices of `finish`, `stats` and
`packet_latency`, and the reductions (max of cycles, sum of counters) are order-free.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from embedding.nmp.timing import NEVER, new_state, nmp_channel, serve

__all__ = ["host_channels", "nmp_channels", "stable_order"]


@njit(cache=True, parallel=True)
def host_channels(order, starts, rank, bank, row, bursts, window, tp, banks_per_group, ranks, banks, bank_groups,
                  finish, stats):
    """Host baseline: channel c serves order[starts[c]:starts[c + 1]] (lookups in pooling order) over the shared
    channel data bus. stats: (channels, 4) counters. Returns each channel's last cycle."""
    channels = starts.shape[0] - 1
    cycles = np.zeros(channels, np.int64)
    earliest = np.zeros(rank.shape[0], np.int64)
    for c in prange(channels):
        if starts[c + 1] > starts[c]:
            st = new_state(ranks, banks, bank_groups)
            cycles[c] = serve(order, starts[c], starts[c + 1], rank, bank, row, bursts, earliest, NEVER, window, tp,
                              banks_per_group, False, st, finish, stats[c])
    return cycles


@njit(cache=True, parallel=True)
def nmp_channels(cstart, packet_base, packet_starts, group_order, group_starts, ranks, rank, bank, row, bursts, hit,
                 psum_bursts, inst_cost, inst_den, window, tp, banks_per_group, banks, bank_groups, packet_sync, finish,
                 stats, packet_latency):
    """Near-memory execution: channel c owns send positions cstart[c]:cstart[c + 1] and packets
    packet_base[c]:packet_base[c + 1]. packet_starts (global send positions, packets + 1) and group_starts
    (packets × ranks + 1) index send positions; group_order lists the misses grouped by (packet, rank). Each
    channel runs timing.nmp_channel on its slices, renumbered from 0. Returns each channel's last cycle."""
    channels = cstart.shape[0] - 1
    cycles = np.zeros(channels, np.int64)
    for c in prange(channels):
        lo = cstart[c]
        hi = cstart[c + 1]
        if hi == lo:
            continue
        p0 = packet_base[c]
        p1 = packet_base[c + 1]
        g0 = group_starts[p0 * ranks]
        g1 = group_starts[p1 * ranks]
        st = new_state(ranks, banks, bank_groups)
        cycles[c] = nmp_channel(np.arange(hi - lo), packet_starts[p0:p1 + 1] - lo, group_order[g0:g1] - lo,
                                group_starts[p0 * ranks:p1 * ranks + 1] - g0, ranks, rank[lo:hi], bank[lo:hi],
                                row[lo:hi], bursts[lo:hi], hit[lo:hi], psum_bursts[p0:p1], inst_cost[lo:hi], inst_den, window,
                                tp, banks_per_group, packet_sync, st, finish[lo:hi], stats[c], packet_latency[p0:p1])
    return cycles


@njit(cache=True)
def stable_order(key, size):
    """Permutation that sorts `key` (integers in [0, size)) stably: a counting sort, O(n + size), where numpy's
    stable argsort of scattered int64 keys costs a timsort."""
    count = np.zeros(size + 1, np.int64)
    for k in key:
        count[k + 1] += 1
    for k in range(size):
        count[k + 1] += count[k]
    out = np.empty(key.shape[0], np.int64)
    for i in range(key.shape[0]):
        out[count[key[i]]] = i
        count[key[i]] += 1
    return out
