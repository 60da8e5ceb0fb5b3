"""Numba kernels: DDR command scheduling (FR-FCFS, open page) and the per-rank LRU RankCache.

The scheduler is event-driven, not cycle-stepped: for each request it picks (first-ready: oldest row hit in the
window, else the request whose activation could issue first) and computes the earliest cycle of each DDR command (PRE, ACT, RD per burst) from the bank,
rank and bus state. Command and data buses are cycle reservations, so a command or burst may fill an earlier
gap, as a real controller interleaves commands of different banks. The bursts of one vector (same bank group) are
spaced max(tCCD_L, 2·tBL) so that another bank group's burst can fill the slot between them (tCCD_S = tBL).

Timing vector `tp` (NmpConfig.timing_vector): tRCD tCL tRP tRC tRAS tBL tCCD_S tCCD_L tRRD_S tRRD_L tFAW tRTP,
then the C/A cycles one DDR command occupies (a command reserves that many consecutive command slots).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["new_state", "serve", "host_channel", "nmp_channel", "lru_filter"]

RING_BITS = 14
RING_MASK = (1 << RING_BITS) - 1
NEVER = -(1 << 40)
SYNC_OFF, SYNC_STRICT, SYNC_OVERLAP = 0, 1, 2  # NmpConfig.packet_sync, see config.SYNC_MODES


@njit(cache=True)
def new_state(ranks: int, banks: int, bank_groups: int) -> tuple:
    """Fresh DRAM state of one channel: all banks closed, buses idle. Per-bank arrays are flat (rank × banks + bank)
    so the scheduler's window scan reads one index per entry."""
    nb = ranks * banks
    return (np.full(nb, -1, np.int64),  # open row
            np.full(nb, NEVER, np.int64),  # last ACT per bank
            np.full(nb, NEVER, np.int64),  # last RD per bank
            np.full(ranks, NEVER, np.int64), np.zeros(ranks, np.int64),  # last ACT per rank, its bank group
            np.full((ranks, 4), NEVER, np.int64), np.zeros(ranks, np.int64),  # tFAW window of 4 ACTs, pointer
            np.full((ranks, bank_groups), NEVER, np.int64),  # last column command per bank group
            np.full((ranks, 1 << RING_BITS), -1, np.int64),  # data-bus cycle ring per bus (index 0 when shared)
            np.full((ranks, 1 << RING_BITS), -1, np.int64),  # command-slot ring per bus
            np.zeros(ranks, np.int64),  # data-bus low watermark per bus
            np.full(nb, NEVER, np.int64),  # bank_ready: earliest ACT the bank allows (tRC; tRTP + tRP if open)
            np.full(ranks, NEVER, np.int64),  # rank_ready: earliest ACT the rank allows (tRRD_S, tFAW)
            np.zeros((ranks, 1 << RING_BITS), np.int64),  # data-bus skip pointers (see _free)
            np.zeros((ranks, 1 << RING_BITS), np.int64))  # command-slot skip pointers


@njit(cache=True)
def _free(taken, jump, bus, c):
    """First cycle ≥ c not reserved on `bus`. A reserved cycle x (taken[x] == x, ring-indexed) stores in jump[x] a
    cycle past the reserved run it starts; chains are shortened as they are walked (union-find path compression),
    so skipping a long reserved stretch costs O(1) amortised instead of one step per cycle."""
    root = c
    while taken[bus, root & RING_MASK] == root:
        root = jump[bus, root & RING_MASK]
    while c != root:
        nxt = jump[bus, c & RING_MASK]
        jump[bus, c & RING_MASK] = root
        c = nxt
    return root


@njit(cache=True)
def _reserve(taken, jump, bus, c, length):
    """Reserve cycles [c, c + length) on `bus`."""
    for k in range(length):
        taken[bus, (c + k) & RING_MASK] = c + k
        jump[bus, (c + k) & RING_MASK] = c + length


@njit(cache=True)
def _slot(ring, ring_jump, bus, t, n):
    """Earliest t' ≥ t with n free command slots t'..t'+n-1 on `bus`, reserved."""
    while True:
        t = _free(ring, ring_jump, bus, t)
        k = 1
        while k < n and ring[bus, (t + k) & RING_MASK] != t + k:
            k += 1
        if k == n:
            break
        t += k
    _reserve(ring, ring_jump, bus, t, n)
    return t


@njit(cache=True)
def _column_slot(ring, ring_jump, data, data_jump, low, bus, t, tCL, tBL, ncmd):
    """Earliest t' ≥ t with ncmd free command slots from t' and tBL free data cycles from t' + tCL; reserves both.
    low[bus]: every data cycle below it is taken or in a hole too short for a burst, so the search skips it."""
    t = max(t, low[bus] - tCL)
    while True:
        c = _free(data, data_jump, bus, t + tCL)
        k = 1
        while k < tBL and data[bus, (c + k) & RING_MASK] != c + k:
            k += 1
        if k < tBL:  # the hole at c is shorter than a burst
            t = _free(data, data_jump, bus, c + k) - tCL
            continue
        t = c - tCL
        k = 0
        while k < ncmd and ring[bus, (t + k) & RING_MASK] != t + k:
            k += 1
        if k < ncmd:
            t += k + 1
            continue
        break
    _reserve(ring, ring_jump, bus, t, ncmd)
    _reserve(data, data_jump, bus, t + tCL, tBL)
    end = t + tCL
    c = low[bus]
    while True:
        c = _free(data, data_jump, bus, c)
        run = 0
        while run < tBL and data[bus, (c + run) & RING_MASK] != c + run and c + run < end:
            run += 1
        if run < tBL and c + run < end:
            c += run  # a hole shorter than a burst, closed in by bursts on both sides: dead
            continue
        break
    low[bus] = c
    return t


@njit(cache=True)
def serve(order, lo, hi, rank, bank, row, bursts, earliest, col_floor, window, tp, banks_per_group, per_rank_bus,
          st, finish, stats):
    """Serve requests order[lo:hi] (queue order) with FR-FCFS over `window` entries; writes finish[i] (cycle the
    last data beat leaves) and adds to stats = [row hits, ACT, RD bursts, PRE]. Returns the last finish.
    A request's commands issue from earliest[i]; its column reads not before col_floor.

    First-ready rule: the oldest entry that is a row hit or whose ACT could issue by `now` (the latest ACT so far);
    if none, the entry whose ACT could issue first, oldest on ties. Written as one key per entry, (max(ready, now),
    age) with ready = now for a row hit, so the scan is branch-light over window-local arrays; the bank and rank
    terms of `ready` are cached in the state (bank_ready, rank_ready) and updated when a command changes them."""
    (open_row, bank_act, bank_rd, rank_act, rank_act_bg, faw, faw_ptr, bg_col, data, ring, low, bank_ready,
     rank_ready, data_jump, ring_jump) = st
    tRCD, tCL, tRP, tRC, tRAS, tBL, tCCD_S, tCCD_L, tRRD_S, tRRD_L, tFAW, tRTP, ncmd = (
        tp[0], tp[1], tp[2], tp[3], tp[4], tp[5], tp[6], tp[7], tp[8], tp[9], tp[10], tp[11], tp[12])
    nbank = bank_ready.shape[0] // rank_ready.shape[0]
    # window in age order: request, its flat bank, rank, DRAM row, earliest start; keys: the pick key per entry
    w_req = np.empty(window, np.int64)
    w_gb = np.empty(window, np.int64)
    w_r = np.empty(window, np.int64)
    w_row = np.empty(window, np.int64)
    w_e = np.empty(window, np.int64)
    keys = np.empty(window, np.int64)
    nin = 0
    nxt = lo
    while nin < window and nxt < hi:
        i = order[nxt]
        w_req[nin] = i
        w_r[nin] = rank[i]
        w_gb[nin] = rank[i] * nbank + bank[i]
        w_row[nin] = row[i]
        w_e[nin] = earliest[i]
        nin += 1
        nxt += 1
    last = 0
    now = NEVER
    while nin > 0:
        for j in range(nin):  # branch-free, so it vectorises; the window is kept in age order
            gb = w_gb[j]
            k = max(max(w_e[j], now), max(bank_ready[gb], rank_ready[w_r[j]]))
            keys[j] = now if open_row[gb] == w_row[j] else k
        best = keys[0]
        for j in range(1, nin):
            best = min(best, keys[j])
        pick = 0
        while keys[pick] != best:
            pick += 1
        i = w_req[pick]
        e = w_e[pick]
        gb = w_gb[pick]
        nin -= 1
        for j in range(pick, nin):
            w_req[j] = w_req[j + 1]
            w_gb[j] = w_gb[j + 1]
            w_r[j] = w_r[j + 1]
            w_row[j] = w_row[j + 1]
            w_e[j] = w_e[j + 1]
        r = rank[i]
        bg = bank[i] // banks_per_group
        bus = r if per_rank_bus else 0
        if open_row[gb] == row[i]:
            stats[0] += 1
            tcol = max(e, bank_act[gb] + tRCD)
        else:
            tact = max(e, bank_act[gb] + tRC)
            if open_row[gb] >= 0:
                tpre = max(e, bank_act[gb] + tRAS, bank_rd[gb] + tRTP)
                tpre = _slot(ring, ring_jump, bus, tpre, ncmd)
                stats[3] += 1
                tact = max(tact, tpre + tRP)
            tact = max(tact, rank_act[r] + (tRRD_L if rank_act_bg[r] == bg else tRRD_S))
            tact = max(tact, faw[r, faw_ptr[r]] + tFAW)
            tact = _slot(ring, ring_jump, bus, tact, ncmd)
            faw[r, faw_ptr[r]] = tact
            now = max(now, tact)
            faw_ptr[r] = (faw_ptr[r] + 1) & 3
            rank_act[r] = tact
            rank_act_bg[r] = bg
            rank_ready[r] = max(faw[r, faw_ptr[r]] + tFAW, tact + tRRD_S)
            bank_act[gb] = tact
            open_row[gb] = row[i]
            stats[1] += 1
            tcol = tact + tRCD
        # bursts of one vector hit one bank group: space them so another bank group's burst fits between
        gap = max(tCCD_L, 2 * tBL) if bursts[i] > 1 else tCCD_L
        tcol = max(tcol, col_floor)
        t = tcol
        for k in range(bursts[i]):
            t = max(tcol, bg_col[r, bg] + (gap if k > 0 else tCCD_L))
            if tCCD_S > tBL:  # otherwise the data-bus reservation already keeps column commands tCCD_S apart
                t = max(t, bg_col[r].max() + tCCD_S)
            t = _column_slot(ring, ring_jump, data, data_jump, low, bus, t, tCL, tBL, ncmd)
            bg_col[r, bg] = t
        stats[2] += bursts[i]
        if nxt < hi:  # the freed queue slot takes the next request once this one's last column command issued
            j = order[nxt]
            w_req[nin] = j
            w_r[nin] = rank[j]
            w_gb[nin] = rank[j] * nbank + bank[j]
            w_row[nin] = row[j]
            w_e[nin] = max(earliest[j], t)
            nin += 1
            nxt += 1
        bank_rd[gb] = t
        bank_ready[gb] = max(bank_act[gb] + tRC, t + tRTP + tRP)
        finish[i] = t + tCL + tBL
        if finish[i] > last:
            last = finish[i]
    return last


@njit(cache=True)
def host_channel(order, rank, bank, row, bursts, window, tp, banks_per_group, st, finish, stats):
    """Host baseline on one channel: every request's data crosses the shared channel data bus."""
    earliest = np.zeros(rank.shape[0], np.int64)
    return serve(order, 0, order.shape[0], rank, bank, row, bursts, earliest, NEVER, window, tp, banks_per_group,
                 False, st, finish, stats)


@njit(cache=True)
def nmp_channel(send_order, packet_starts, group_order, group_starts, ranks, rank, bank, row, bursts, hit,
                psum_bursts, inst_cost, inst_den, window, tp, banks_per_group, packet_sync, st, finish, stats,
                packet_latency):
    """RecNMP execution on one channel, packet-synchronous.

    send_order: lookups in C/A send order, packet by packet (packet p = send_order[packet_starts[p]:...]);
    instruction i holds the C/A bus inst_cost[i] / inst_den cycles (the bus clock is kept in 1/inst_den cycles, so
    several instructions may share a cycle or one may span several; an instruction arrives at the end of the cycle
    its last bit is sent in). group_order: the same lookups grouped by (packet, rank),
    misses only, in send order within a group (group_starts has packets × ranks + 1 entries). packet_sync
    (SYNC_*): off, a rank runs ahead into the next packet as soon as its own work is done; strict, a packet's DRAM
    work starts when every rank finished the previous packet (barrier); overlap, its PRE/ACT may issue before the
    barrier but its column reads (which feed the psum adder) wait for it. Instructions may be sent while the
    previous packet executes (one packet of instruction buffering); RankCache hits cost one cycle. Psums go up the channel data bus (psum_bursts[p] bursts). Returns the batch's last cycle.
    """
    tBL = tp[5]
    n_packets = packet_starts.shape[0] - 1
    arrival = np.zeros(rank.shape[0], np.int64)
    earliest = np.zeros(rank.shape[0], np.int64)
    ca_u = 0  # C/A bus clock in 1/inst_den cycles
    barrier = 0
    psum_free = 0
    prev_start = 0
    for p in range(n_packets):
        ca_u = max(ca_u, prev_start * inst_den)  # the rank-NMP instruction buffers hold one packet ahead
        first_send = ca_u // inst_den
        prev_start = barrier
        done = barrier
        for k in range(packet_starts[p], packet_starts[p + 1]):
            i = send_order[k]
            ca_u += inst_cost[i]
            ca = (ca_u + inst_den - 1) // inst_den
            arrival[i] = ca
            earliest[i] = max(ca, barrier) if packet_sync == SYNC_STRICT else ca
            if hit[i]:
                finish[i] = max(earliest[i], barrier if packet_sync == SYNC_OVERLAP else NEVER) + 1
                done = max(done, finish[i])
        for r in range(ranks):
            g = p * ranks + r
            lo = group_starts[g]
            hi = group_starts[g + 1]
            if hi > lo:
                floor = barrier if packet_sync == SYNC_OVERLAP else NEVER
                done = max(done, serve(group_order, lo, hi, rank, bank, row, bursts, earliest, floor, window, tp,
                                       banks_per_group, True, st, finish, stats))
        barrier = done + 1  # DIMM-NMP adds the ranks' partial sums
        psum_free = max(psum_free, barrier) + psum_bursts[p] * tBL
        packet_latency[p] = psum_free - first_send
    return max(psum_free, barrier)


@njit(cache=True)
def _unlink(r, s, prv, nxt, head, tail):
    a = prv[r, s]
    c = nxt[r, s]
    if a >= 0:
        nxt[r, a] = c
    else:
        head[r] = c
    if c >= 0:
        prv[r, c] = a
    else:
        tail[r] = a


@njit(cache=True)
def _push_front(r, s, prv, nxt, head, tail):
    prv[r, s] = -1
    nxt[r, s] = head[r]
    if head[r] >= 0:
        prv[r, head[r]] = s
    else:
        tail[r] = s
    head[r] = s


@njit(cache=True)
def lru_filter(keys, ranks, flags, cap, table, slot_key, prv, nxt, head, tail, size, hit):
    """Per-rank LRU RankCache over lookups in execution order; only flagged (locality-bit) lookups probe and fill
    it. State (table: key → slot, per-rank linked lists) persists across calls. Sets hit[i]."""
    for i in range(keys.shape[0]):
        if not flags[i]:
            continue
        r = ranks[i]
        k = keys[i]
        if k in table:
            s = table[k]
            hit[i] = True
            _unlink(r, s, prv, nxt, head, tail)
        elif size[r] < cap:
            s = size[r]
            size[r] += 1
            slot_key[r, s] = k
            table[k] = s
        else:
            s = tail[r]
            del table[slot_key[r, s]]
            _unlink(r, s, prv, nxt, head, tail)
            slot_key[r, s] = k
            table[k] = s
        _push_front(r, s, prv, nxt, head, tail)
