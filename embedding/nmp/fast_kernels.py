"""Numba kernels of the FAST fidelity level: the DRAM scheduler (address decoding and packet planning: fast_plan).

The scheduler keeps the detailed model's FR-FCFS pick rule (timing.serve: smallest key, oldest first, where the
key is `now` for a row hit and else the cycle the ACT could issue) but not its cost: requests queue in one FIFO
per bank and only the bank heads compete, in one branch-free min over the banks (pick_head), instead of a scan of
the 32-entry window. After a request opens a row, its bank's queue is searched for that row only when a
per-bank tally of the queued rows (modulo ROW_TALLY) says one may be there. Booking is a scoreboard with O(1) state
per bank, rank and bus (one record each, see B_/R_/S_ below) instead of cycle-ring reservations: the data bus is one "free from" cycle and a vector's bursts are charged back to back
(the detailed model interleaves them with another bank group's; a same-bank-group successor slips by
tCCD_L − tBL, as it does there), and the C/A bus remembers the last 64 cycles so that commands do not collide.

Timing vector `tp` (NmpConfig.timing_vector): tRCD tCL tRP tRC tRAS tBL tCCD_S tCCD_L tRRD_S tRRD_L tFAW tRTP,
then the C/A cycles one DDR command occupies.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from embedding.nmp.timing import NEVER, SYNC_OVERLAP, SYNC_STRICT

CMD_SLOTS = 64  # command-bus cycles remembered per bus (a request's commands span < 64 cycles)
CMD_MASK = CMD_SLOTS - 1
ROW_TALLY = 64  # queued requests are tallied per bank and row modulo 64 (skips most row-hit searches)
MAX_CYCLE = 1 << 62
AGE_BITS = 20  # a pick compares (key << AGE_BITS) | age: ties on the key go to the oldest request
AGE_MASK = (1 << AGE_BITS) - 1
EMPTY = MAX_CYCLE - 1  # head key of an empty bank queue
HIT = -1  # bank part of a row hit's key: below every cycle (cycles are >= 0), above NEVER

__all__ = ["host_fast", "nmp_fast", "serve_fast", "pick_head", "pick_head_scan"]


# Scoreboard fields. Per bank, bank_st[rank · banks + bank, field]: open row, last ACT, ready for the next ACT,
# its queue's head and tail slots.
B_ROW, B_ACT, B_READY, B_QHEAD, B_QTAIL = 0, 1, 2, 3, 4
# Per rank, rank_st[rank, field]: last ACT and its bank group, earliest next ACT (tRRD_S, tFAW), tFAW window
# pointer, queued requests, data bus free from (row 0 when the channel shares one bus), the last 4 ACTs
# (R_FAW..), the next column per bank group (R_BG..).
R_ACT, R_ACT_BG, R_READY, R_FAW_PTR, R_QUEUED, R_BUS_FREE, R_FAW, R_BG = 0, 1, 2, 3, 4, 5, 6, 10
# Per queue slot, slot_st[slot, field]: request, earliest start, age (queue position), next slot of its bank's
# queue, and the request's row, rank and bank group (copied in so that the queue walks stay in the slot records).
S_REQ, S_E, S_AGE, S_NEXT, S_ROW, S_RANK, S_BG = 0, 1, 2, 3, 4, 5, 6


@njit(cache=True)
def _new_state(ranks, banks, bank_groups, window):
    """Scoreboard of one channel: O(1) state per bank, rank, bus and queue slot, one record (row) each so that
    the booking of a request touches a few cache lines (see the field names above)."""
    nb = ranks * banks
    bank_st = np.full((nb, 8), NEVER, np.int64)
    bank_st[:, B_ROW] = -1
    bank_st[:, B_QHEAD] = -1
    bank_st[:, B_QTAIL] = -1
    rank_st = np.full((ranks, R_BG + bank_groups), NEVER, np.int64)
    rank_st[:, R_ACT_BG] = 0
    rank_st[:, R_FAW_PTR] = 0
    rank_st[:, R_QUEUED] = 0
    cmd = np.full((ranks, CMD_SLOTS), NEVER, np.int64)  # recent command cycles per command bus, by cycle mod 64
    head = np.full(nb, EMPTY, np.int64)  # per bank: its queue head's (key part << AGE_BITS) | age, see serve_fast
    slot_st = np.empty((window, 8), np.int64)  # fields 0..6 used: one 64 B record per slot
    ring = np.empty(window, np.int64)  # last column command of each served request, by serve order mod window
    tally = np.zeros((nb, ROW_TALLY), np.int32)  # queued requests per bank and row modulo ROW_TALLY
    return bank_st, rank_st, cmd, head, slot_st, ring, tally


@njit(cache=True, inline="always")
def _book(cb, t, n):
    """Earliest t' ≥ t with command slots t'..t'+n-1 free on the command bus `cb` (cycles mod CMD_SLOTS); booked."""
    if n == 1:  # one-cycle commands (DDR4): the plain scan
        while cb[t & CMD_MASK] == t:
            t += 1
        cb[t & CMD_MASK] = t
        return t
    while True:
        k = 0
        while k < n and cb[(t + k) & CMD_MASK] != t + k:
            k += 1
        if k == n:
            break
        t += k + 1
    for k in range(n):
        cb[(t + k) & CMD_MASK] = t + k
    return t


@njit(cache=True, inline="always")
def pick_head(head, in_rank, rank_ready, now, r_lo, r_hi, nbank, ub, lim):
    """The FR-FCFS pick among bank heads: the bank whose head has the smallest composite key, lowest bank on ties.

    head[u] = (bank part << AGE_BITS) | age, so a head's composite key is max(head, floor << AGE_BITS | its age)
    with floor = max(now, rank ready); a row hit has bank part HIT and age 0. The key, clamped to `lim` (an EMPTY
    head never wins, a packed key never overflows), is packed above the bank index (ub bits), so the pick is a
    branch-free (SIMD) min whose ties go to the lowest bank, as pick_head_scan's first-wins scan."""
    best = MAX_CYCLE
    for r in range(r_lo, r_hi):
        if in_rank[r] == 0:
            continue
        fl = max(max(now, rank_ready[r]), HIT) << AGE_BITS
        base = r * nbank
        hv = head[base:base + nbank]
        rb = MAX_CYCLE
        for k in range(nbank):
            h = hv[k]
            rb = min(rb, (min(max(h, fl | (h & AGE_MASK)), lim) << ub) | (base + k))
        best = min(best, rb)
    return best & ((1 << ub) - 1)


@njit(cache=True)
def pick_head_scan(head, in_rank, rank_ready, now, r_lo, r_hi, nbank):
    """Reference for pick_head (the rule as first written): a first-wins argmin scan of the composite keys."""
    best = MAX_CYCLE
    gb_pick = -1
    for r in range(r_lo, r_hi):
        if in_rank[r] == 0:
            continue
        fl = max(max(now, rank_ready[r]), HIT) << AGE_BITS
        for u in range(r * nbank, (r + 1) * nbank):
            h = head[u]
            c = max(h, fl | (h & AGE_MASK))
            if c < best:
                best = c
                gb_pick = u
    return gb_pick


@njit(cache=True)
def serve_fast(seq, lo, hi, rank, bank, row, bursts, earliest, col_floor, window, tp, banks_per_group, per_rank_bus,
               st, finish, stats):
    """Serve requests seq[lo:hi] (queue order); same contract and pick rule as timing.serve, without its scan.

    FR-FCFS picks the smallest key, oldest first: `now` (the latest ACT) for a row hit, else the cycle the
    request's ACT could issue, max(arrival, now, bank ready, rank ready). Requests of one bank share the bank and
    rank terms, so the queue is kept as one FIFO per bank (its oldest request first, a row hit moved to the front)
    and only the heads compete (pick_head: one SIMD min over the banks of the ranks in play).
    A queue slot freed by a served request admits the next one once that request's last column command issued."""
    bank_st, rank_st, cmd, head, slot_st, ring, tally = st
    tRCD, tCL, tRP, tRC, tBL, tCCD_L, tRRD_S, tRRD_L, tFAW, tRTP, ncmd = (tp[0], tp[1], tp[2], tp[3], tp[5], tp[7],
                                                                           tp[8], tp[9], tp[10], tp[11], tp[12])
    nbank = bank_st.shape[0] // rank_st.shape[0]
    ub = 0  # bits of a bank index (rank · banks + bank) packed under a key
    while (1 << ub) < bank_st.shape[0]:
        ub += 1
    lim = (1 << (62 - ub)) - 1  # keys clamp here: an EMPTY head never wins, a packed key never overflows
    bg_bits = 0
    while (1 << bg_bits) < banks_per_group:
        bg_bits += 1
    ring_in = ring_out = 0  # ring slots (wrapping counters: no modulo in the loop)
    gap = max(tCCD_L, 2 * tBL)
    bus = rank[seq[lo]] if per_rank_bus else 0  # every request of one call uses the same data and C/A bus
    cb = cmd[bus]
    free = rank_st[bus, R_BUS_FREE]
    r_lo = rank[seq[lo]] if per_rank_bus else 0  # ranks this call can touch: [r_lo, r_hi)
    r_hi = r_lo + 1 if per_rank_bus else rank_st.shape[0]
    in_rank = rank_st[:, R_QUEUED]
    rank_ready = rank_st[:, R_READY]
    for k in range(window):  # free slots form a stack threaded through S_NEXT
        slot_st[k, S_NEXT] = k + 1 if k + 1 < window else -1
    free_slot = 0
    last = 0
    pos = lo  # next request to enter the queue
    n_hit = n_act = n_pre = n_rd = 0
    now = NEVER  # latest ACT so far
    for _ in range(hi - lo):
        while pos < hi and free_slot >= 0:  # a freed slot admits the next request once its holder's column issued
            j = seq[pos]
            sl = free_slot
            free_slot = slot_st[sl, S_NEXT]
            e = earliest[j]
            if pos - lo >= window:
                e = max(e, ring[ring_out])
                ring_out = ring_out + 1 if ring_out + 1 < window else 0
            gb = rank[j] * nbank + bank[j]
            rw = row[j]
            slot_st[sl, S_REQ] = j
            slot_st[sl, S_E] = e
            slot_st[sl, S_AGE] = pos
            slot_st[sl, S_NEXT] = -1
            slot_st[sl, S_ROW] = rw
            slot_st[sl, S_RANK] = rank[j]
            slot_st[sl, S_BG] = bank[j] >> bg_bits
            if bank_st[gb, B_QHEAD] < 0:
                bank_st[gb, B_QHEAD] = sl
                if bank_st[gb, B_ROW] == rw:  # a row hit: key `now`, first among equals
                    head[gb] = HIT << AGE_BITS
                else:
                    head[gb] = (max(e, bank_st[gb, B_READY]) << AGE_BITS) | (pos & AGE_MASK)
            else:
                slot_st[bank_st[gb, B_QTAIL], S_NEXT] = sl
            bank_st[gb, B_QTAIL] = sl
            in_rank[rank[j]] += 1
            tally[gb, rw & (ROW_TALLY - 1)] += 1
            pos += 1
        gb = pick_head(head, in_rank, rank_ready, now, r_lo, r_hi, nbank, ub, lim)
        sl = bank_st[gb, B_QHEAD]
        i = slot_st[sl, S_REQ]
        e = slot_st[sl, S_E]
        rw = slot_st[sl, S_ROW]
        bank_st[gb, B_QHEAD] = slot_st[sl, S_NEXT]
        slot_st[sl, S_NEXT] = free_slot
        free_slot = sl
        r = slot_st[sl, S_RANK]
        rank_st[r, R_QUEUED] -= 1
        # book request i: PRE/ACT if its row is not open, then its bursts back to back on the data bus
        bg = slot_st[sl, S_BG]
        nb_ = bursts[i]
        if bank_st[gb, B_ROW] == rw:
            n_hit += 1
            tcol = max(e, bank_st[gb, B_ACT] + tRCD)
        else:
            fp = rank_st[r, R_FAW_PTR]
            tact = max(max(e, bank_st[gb, B_READY]), max(rank_st[r, R_ACT] + (tRRD_L if rank_st[r, R_ACT_BG] == bg else tRRD_S),
                                               rank_st[r, R_FAW + fp] + tFAW))
            if bank_st[gb, B_ROW] >= 0:
                tpre = _book(cb, max(e, tact - tRP), ncmd)
                tact = max(tact, tpre + tRP)
                n_pre += 1
            tact = _book(cb, tact, ncmd)
            rank_st[r, R_FAW + fp] = tact
            fp = (fp + 1) & 3
            rank_st[r, R_FAW_PTR] = fp
            rank_st[r, R_ACT] = tact
            rank_st[r, R_READY] = max(rank_st[r, R_FAW + fp] + tFAW, tact + tRRD_S)
            now = max(now, tact)
            rank_st[r, R_ACT_BG] = bg
            bank_st[gb, B_ACT] = tact
            bank_st[gb, B_ROW] = rw
            n_act += 1
            tcol = tact + tRCD
        tcol = max(max(tcol, col_floor), max(rank_st[r, R_BG + bg], free - tCL))
        tcol = _book(cb, tcol, ncmd)  # a C/A slot taken by a PRE/ACT: the burst slips
        # the vector's bursts hit one bank group, spaced `gap` so another bank group's burst fills between (as the
        # detailed model spaces them); the bus is charged b·tBL, i.e. the interleaving is assumed to succeed
        for k in range(1, nb_):  # the other bursts' column commands, one per tBL as the bus is charged
            cb[(tcol + k * tBL) & CMD_MASK] = tcol + k * tBL
            if ncmd > 1:
                for m in range(1, ncmd):
                    cb[(tcol + k * tBL + m) & CMD_MASK] = tcol + k * tBL + m
        tlast = tcol + (nb_ - 1) * gap
        free = tcol + tCL + nb_ * tBL
        rank_st[r, R_BG + bg] = tlast + tCCD_L - (nb_ - 1) * tBL  # interleaved: the next vector of this bank group
        bank_st[gb, B_READY] = max(bank_st[gb, B_ACT] + tRC, tlast + tRTP + tRP)
        n_rd += nb_
        ring[ring_in] = tlast
        ring_in = ring_in + 1 if ring_in + 1 < window else 0
        # FR within the bank: a queued request for the row now open moves to the front of the bank's queue (the
        # queue is walked only if one of its rows matches the open row modulo ROW_TALLY)
        tally[gb, rw & (ROW_TALLY - 1)] -= 1
        prev = -1
        q = bank_st[gb, B_QHEAD] if tally[gb, rw & (ROW_TALLY - 1)] else -1
        while q >= 0 and slot_st[q, S_ROW] != rw:
            prev = q
            q = slot_st[q, S_NEXT]
        if q >= 0 and prev >= 0:
            slot_st[prev, S_NEXT] = slot_st[q, S_NEXT]
            if bank_st[gb, B_QTAIL] == q:
                bank_st[gb, B_QTAIL] = prev
            slot_st[q, S_NEXT] = bank_st[gb, B_QHEAD]
            bank_st[gb, B_QHEAD] = q
        q = bank_st[gb, B_QHEAD]  # the bank's new head competes again
        if q < 0:
            head[gb] = EMPTY
        elif slot_st[q, S_ROW] == rw:
            head[gb] = HIT << AGE_BITS
        else:
            head[gb] = (max(slot_st[q, S_E], bank_st[gb, B_READY]) << AGE_BITS) | (slot_st[q, S_AGE] & AGE_MASK)
        finish[i] = tlast + tCL + tBL
        last = max(last, finish[i])
    if last >= lim >> (AGE_BITS + 1):
        raise ValueError("fast NMP model: a batch's emulated cycles exceed the packed-key range")
    rank_st[bus, R_BUS_FREE] = free
    stats[0] += n_hit
    stats[1] += n_act
    stats[2] += n_rd
    stats[3] += n_pre
    return last


@njit(cache=True)
def _host_channel(c, order, starts, rank, bank, row, bursts, window, tp, banks_per_group, ranks, banks, bank_groups,
                  earliest, finish, stats):
    """Host baseline of channel c: order[starts[c]:starts[c + 1]] over its shared data bus. Returns its last cycle."""
    if starts[c + 1] == starts[c]:
        return 0
    st = _new_state(ranks, banks, bank_groups, window)
    return serve_fast(order, starts[c], starts[c + 1], rank, bank, row, bursts, earliest, NEVER, window, tp,
                      banks_per_group, False, st, finish, stats[c])


@njit(cache=True, parallel=True)
def host_fast(order, starts, rank, bank, row, bursts, window, tp, banks_per_group, ranks, banks, bank_groups, finish,
              stats):
    """Host baseline, all channels in parallel: channel c serves order[starts[c]:starts[c + 1]] over its shared data
    bus. Returns each channel's last cycle."""
    channels = starts.shape[0] - 1
    cycles = np.zeros(channels, np.int64)
    earliest = np.zeros(rank.shape[0], np.int64)
    for c in prange(channels):
        cycles[c] = _host_channel(c, order, starts, rank, bank, row, bursts, window, tp, banks_per_group, ranks, banks,
                                  bank_groups, earliest, finish, stats)
    return cycles


@njit(cache=True)
def _nmp_channel(c, send, pstart, packet_base, grouped, gstart, ranks, rank, bank, row, bursts, hit, psum, sends_inst,
                 inst_num, inst_den, window, tp, banks_per_group, banks, bank_groups, packet_sync, earliest, finish,
                 stats, packet_latency):
    """Near-memory execution of channel c (see nmp_fast). Returns its last cycle."""
    tBL = tp[5]
    p0, p1 = packet_base[c], packet_base[c + 1]
    if p1 == p0:
        return 0
    st = _new_state(ranks, banks, bank_groups, window)
    misses = np.empty(gstart[p1 * ranks] - gstart[p0 * ranks], np.int64)
    ca_u = 0  # C/A bus clock in 1/inst_den cycles
    ca = 0
    barrier = 0
    psum_free = 0
    prev_start = 0
    for p in range(p0, p1):
        ca_u = max(ca_u, prev_start * inst_den)
        ca = (ca_u + inst_den - 1) // inst_den
        first_send = ca_u // inst_den
        prev_start = barrier
        done = barrier
        for k in range(pstart[p], pstart[p + 1]):
            i = send[k]
            if sends_inst[i]:  # a TensorDIMM slice after its vector's first sends no instruction
                ca_u += inst_num
                ca = ca_u if inst_den == 1 else (ca_u + inst_den - 1) // inst_den
            earliest[i] = max(ca, barrier) if packet_sync == SYNC_STRICT else ca
            if hit[i]:
                finish[i] = max(earliest[i], barrier if packet_sync == SYNC_OVERLAP else NEVER) + 1
                done = max(done, finish[i])
        floor = barrier if packet_sync == SYNC_OVERLAP else NEVER
        for r in range(ranks):
            g = p * ranks + r
            nm = 0
            for k in range(gstart[g], gstart[g + 1]):
                if not hit[grouped[k]]:
                    misses[nm] = grouped[k]
                    nm += 1
            if nm:
                last = serve_fast(misses, 0, nm, rank, bank, row, bursts, earliest, floor, window, tp,
                                  banks_per_group, True, st, finish, stats[c])
                done = max(done, last)
        barrier = done + 1
        psum_free = max(psum_free, barrier) + psum[p] * tBL
        packet_latency[p] = psum_free - first_send
    return max(psum_free, barrier)


@njit(cache=True, parallel=True)
def nmp_fast(send, pstart, packet_base, grouped, gstart, ranks, rank, bank, row, bursts, hit, psum, sends_inst,
             inst_num, inst_den, window, tp, banks_per_group, banks, bank_groups, packet_sync, finish, stats,
             packet_latency):
    """Near-memory execution, channels in parallel; the packet skeleton of timing.nmp_channel (instruction sends,
    one packet of buffering, barrier and psum return) with serve_fast for each (packet, rank) group of misses.
    send/pstart: lookups in C/A order and each packet's first send position; grouped/gstart: lookups per
    (packet, rank) group in service order; hit: per lookup; sends_inst: whether a lookup sends an NMP instruction
    (inst_num / inst_den C/A cycles; the bus clock is kept in 1/inst_den cycles). Returns each channel's last cycle."""
    channels = packet_base.shape[0] - 1
    cycles = np.zeros(channels, np.int64)
    earliest = np.zeros(rank.shape[0], np.int64)
    for c in prange(channels):
        cycles[c] = _nmp_channel(c, send, pstart, packet_base, grouped, gstart, ranks, rank, bank, row, bursts, hit,
                                 psum, sends_inst, inst_num, inst_den, window, tp, banks_per_group, banks, bank_groups,
                                 packet_sync, earliest, finish, stats, packet_latency)
    return cycles
