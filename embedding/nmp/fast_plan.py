"""Numba bookkeeping of the FAST fidelity level: address decoding and packet planning in O(n) passes.

The same results as dram.map_lookups and the numpy bookkeeping of execute.emulate_nmp (packets, C/A send order,
partial sums), with counting sorts instead of lexsorts and one pass per step instead of a chain of numpy calls.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["decode", "pair_order", "group_and_send", "psum_bursts"]


@njit(cache=True, parallel=True)
def decode(tables, rows, bases, stride, colour, spread, step, block_bits, row_bytes, geo, granule_bits, random,
           frame_bits, mult, add, shift, channel, rank, bank, row, column, bursts, key):
    """dram.map_lookups per lookup, in one pass. geo = (channels, ranks_per_channel, banks_per_group, col_bits,
    and the bit widths of channel, rank, bank group, bank fields); colour[0] < 0 means no page colouring, else
    table t's block b lives in colour colour[t] + (b mod spread[t])·step at rank-local block b // spread[t]
    (dram.Placement.local_address). Writes the DecodedLookups fields."""
    channels, rpc, bpg, col_bits, cb, rb, bgb, bkb = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7]
    coloured = colour[0] >= 0
    clb = granule_bits - 6
    fmask = (np.int64(1) << frame_bits) - 1
    for i in prange(tables.shape[0]):
        t = tables[i]
        off = rows[i] * stride[t]
        glob = 0
        if coloured:
            bb = block_bits[t]
            blk = off >> bb
            glob = colour[t] + (blk % spread[t]) * step
            off = ((blk // spread[t]) << bb) + (off & ((np.int64(1) << bb) - 1))
        phys = bases[t] + off
        addr = phys
        if random:
            x = (addr >> 12) & fmask
            for k in range(3):
                x = (x * mult[k] + add[k]) & fmask
                x ^= x >> shift
            addr = (x << 12) | (addr & 4095)
        line = addr >> 6
        pos = 0
        col_low = line & ((1 << clb) - 1)
        pos += clb
        ch = (line >> pos) & ((1 << cb) - 1)
        pos += cb
        bg = (line >> pos) & ((1 << bgb) - 1)
        pos += bgb
        col_high = (line >> pos) & ((1 << (col_bits - clb)) - 1)
        pos += col_bits - clb
        bk = (line >> pos) & ((1 << bkb) - 1)
        pos += bkb
        rk = (line >> pos) & ((1 << rb) - 1)
        pos += rb
        rw = line >> pos
        ch ^= rw & ((1 << cb) - 1)
        bg ^= (rw >> cb) & ((1 << bgb) - 1)
        bk ^= (rw >> (cb + bgb)) & ((1 << bkb) - 1)
        if coloured:
            ch = glob % channels
            rk = glob // channels
        channel[i] = ch
        rank[i] = rk
        bank[i] = bg * bpg + bk
        row[i] = rw
        column[i] = col_low | (col_high << clb)
        bursts[i] = (row_bytes[t] + 63) // 64
        key[i] = (phys >> 6) * (channels * rpc) + ch * rpc + rk


@njit(cache=True)
def _counting_sort(key, size, src):
    """src stably reordered by key[src] (keys in [0, size))."""
    count = np.zeros(size + 1, np.int64)
    for i in src:
        count[key[i] + 1] += 1
    for k in range(size):
        count[k + 1] += count[k]
    out = np.empty(src.shape[0], np.int64)
    for i in src:
        out[count[key[i]]] = i
        count[key[i]] += 1
    return out


@njit(cache=True)
def pair_order(channel, poolings, span, channels):
    """Lookups sorted by (channel, pooling, index) = np.lexsort((poolings, channel)); pair_of: each lookup's
    (channel, pooling) pair, numbered in that order; pairs: the pair keys channel·span + pooling.
    One counting sort on the pair key, computed on the fly (no key array)."""
    n = channel.shape[0]
    size = channels * span
    count = np.zeros(size + 1, np.int64)
    for i in range(n):
        count[channel[i] * span + poolings[i] + 1] += 1
    m = 0
    for k in range(size):
        m += count[k + 1] > 0  # pairs present
        count[k + 1] += count[k]
    order = np.empty(n, np.int64)
    for i in range(n):
        k = channel[i] * span + poolings[i]
        order[count[k]] = i
        count[k] += 1
    pair_of = np.empty(n, np.int64)
    pairs = np.empty(m, np.int64)
    p = -1
    prev = -1
    for t in range(n):
        i = order[t]
        k = channel[i] * span + poolings[i]
        if k != prev:
            p += 1
            prev = k
            pairs[p] = k
        pair_of[i] = p
    return order, pair_of, pairs


@njit(cache=True)
def group_and_send(order, pair_of, pair_rank, pair_packet, rank, n_packets, rpc):
    """Per (packet, rank) group, its lookups in (pair rank, index) order, and the C/A send order: within a packet,
    round-robin over ranks (= np.lexsort((rank, position in group, packet)) as the detailed model sends)."""
    n = order.shape[0]
    pr = pair_rank[pair_of]
    by_pair = order if _is_sorted(pr, order) else _counting_sort(pr, pair_rank.shape[0], order)
    gk = pair_packet[pair_of] * rpc + rank
    grouped = _counting_sort(gk, n_packets * rpc, by_pair)
    gstart = np.zeros(n_packets * rpc + 1, np.int64)
    for i in range(n):
        gstart[gk[i] + 1] += 1
    for k in range(n_packets * rpc):
        gstart[k + 1] += gstart[k]
    send = np.empty(n, np.int64)
    pstart = np.empty(n_packets + 1, np.int64)
    s = 0
    for p in range(n_packets):
        pstart[p] = s
        longest = 0
        for r in range(rpc):
            longest = max(longest, gstart[p * rpc + r + 1] - gstart[p * rpc + r])
        for j in range(longest):
            for r in range(rpc):
                g = p * rpc + r
                if gstart[g] + j < gstart[g + 1]:
                    send[s] = grouped[gstart[g] + j]
                    s += 1
    pstart[n_packets] = s
    return grouped, gstart, send, pstart


@njit(cache=True)
def _is_sorted(key, order):
    for k in range(1, order.shape[0]):
        if key[order[k]] < key[order[k - 1]]:
            return False
    return True


@njit(cache=True)
def psum_bursts(order, pair_of, pair_packet, unit, units, tables, row_bytes, n_packets):
    """Partial sums per packet, in bursts: one vector per (pair, unit) touched (unit: DIMM for RecNMP, channel for
    TensorDIMM), sized by the pooling's table."""
    out = np.zeros(n_packets, np.int64)
    seen = np.full(units, -1, np.int64)
    for k in range(order.shape[0]):
        i = order[k]
        p = pair_of[i]
        if seen[unit[i]] != p:
            seen[unit[i]] = p
            out[pair_packet[p]] += (row_bytes[tables[i]] + 63) // 64
    return out
