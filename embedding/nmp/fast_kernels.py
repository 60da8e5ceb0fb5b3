"""Numba kernels of the FAST fidelity level: the DRAM scheduler (address decoding and packet planning: fast_plan).

The scheduler keeps the detailed model's FR-FCFS pick rule (timing.serve: smallest key, oldest first, where the
key is `now` for a row hit and else the cycle the ACT could issue) but not its cost: requests queue in one FIFO
per bank and only the bank heads compete, in one branch-free min over the banks (pick_head), instead of a scan of
the 32-entry window. Booking is a scoreboard with O(1) state per bank, rank and bus instead
of cycle-ring reservations: the data bus is one "free from" cycle and a vector's bursts are charged back to back
(the detailed model interleaves them with another bank group's; a same-bank-group successor slips by
tCCD_L − tBL, as it does there), and the C/A bus remembers the last 64 cycles so that commands do not collide.

Timing vector `tp` (DramTimings.as_array): tRCD tCL tRP tRC tRAS tBL tCCD_S tCCD_L tRRD_S tRRD_L tFAW tRTP.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from embedding.nmp.timing import NEVER, SYNC_OVERLAP, SYNC_STRICT

CMD_SLOTS = 64  # command-bus cycles remembered per bus (a request's commands span < 64 cycles)
CMD_MASK = CMD_SLOTS - 1
MAX_CYCLE = 1 << 62
AGE_BITS = 20  # a pick compares (key << AGE_BITS) | age: ties on the key go to the oldest request
AGE_MASK = (1 << AGE_BITS) - 1
EMPTY = MAX_CYCLE - 1  # head key of an empty bank queue
HIT = -1  # bank part of a row hit's key: below every cycle (cycles are >= 0), above NEVER

__all__ = ["host_fast", "nmp_fast", "serve_fast", "pick_head", "pick_head_scan"]


@njit(cache=True)
def _new_state(ranks, banks, bank_groups, window):
    nb = ranks * banks
    return (np.full(nb, -1, np.int64), np.full(nb, NEVER, np.int64), np.full(nb, NEVER, np.int64),  # row, ACT, ready
            np.full(ranks, NEVER, np.int64), np.zeros(ranks, np.int64),  # last ACT per rank, its bank group
            np.full(ranks, NEVER, np.int64),  # earliest next ACT per rank (tRRD_S, tFAW)
            np.full((ranks, 4), NEVER, np.int64), np.zeros(ranks, np.int64),  # tFAW window, pointer
            np.full((ranks, bank_groups), NEVER, np.int64),  # next column per bank group
            np.full(ranks, NEVER, np.int64),  # data bus free from (index 0 when shared)
            np.full((ranks, CMD_SLOTS), NEVER, np.int64),  # recent command cycles per command bus, by cycle mod 64
            np.full(nb, -1, np.int64), np.full(nb, -1, np.int64),  # queue per bank: head and tail slot
            np.full(nb, EMPTY, np.int64),  # per bank: its queue head's (key part << AGE_BITS) | age, see serve_fast
            np.empty(window, np.int64), np.empty(window, np.int64),  # per queue slot: request, earliest start,
            np.empty(window, np.int64), np.empty(window, np.int64),  # age (queue position), next slot of its bank
            np.empty(window, np.int64))  # last column command of each served request, by serve order mod window


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
        for u in range(r * nbank, (r + 1) * nbank):
            h = head[u]
            best = min(best, (min(max(h, fl | (h & AGE_MASK)), lim) << ub) | u)
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
    (open_row, act_t, ready_t, rank_act, rank_act_bg, rank_ready, faw, faw_ptr, bg_next, bus_free, cmd, q_head,
     q_tail, head, s_req, s_e, s_age, s_next, ring) = st
    tRCD, tCL, tRP, tRC, tBL, tCCD_L, tRRD_S, tRRD_L, tFAW, tRTP = (tp[0], tp[1], tp[2], tp[3], tp[5], tp[7], tp[8],
                                                                     tp[9], tp[10], tp[11])
    bus = rank[seq[lo]] if per_rank_bus else 0
    nbank = open_row.shape[0] // rank_act.shape[0]
    ub = 0  # bits of a bank index (rank · banks + bank) packed under a key
    while (1 << ub) < open_row.shape[0]:
        ub += 1
    lim = (1 << (62 - ub)) - 1  # keys clamp here: an EMPTY head never wins, a packed key never overflows
    bg_bits = 0
    while (1 << bg_bits) < banks_per_group:
        bg_bits += 1
    ring_in = ring_out = 0  # ring slots (wrapping counters: no modulo in the loop)
    gap = max(tCCD_L, 2 * tBL)
    free = bus_free[bus]  # every request of one call uses the same data bus (one rank's, or the channel's)
    r_lo = rank[seq[lo]] if per_rank_bus else 0  # ranks this call can touch: [r_lo, r_hi)
    r_hi = r_lo + 1 if per_rank_bus else rank_act.shape[0]
    for k in range(window):  # free slots form a stack threaded through s_next
        s_next[k] = k + 1 if k + 1 < window else -1
    free_slot = 0
    in_rank = np.zeros(r_hi, np.int64)  # queued requests per rank
    last = 0
    pos = lo  # next request to enter the queue
    served = 0
    n_hit = n_act = n_pre = n_rd = 0
    now = NEVER  # latest ACT so far
    while served < hi - lo:
        while pos < hi and free_slot >= 0:  # a freed slot admits the next request once its holder's column issued
            j = seq[pos]
            sl = free_slot
            free_slot = s_next[sl]
            s_req[sl] = j
            s_e[sl] = earliest[j]
            if pos - lo >= window:
                s_e[sl] = max(s_e[sl], ring[ring_out])
                ring_out = ring_out + 1 if ring_out + 1 < window else 0
            s_age[sl] = pos
            s_next[sl] = -1
            gb = rank[j] * nbank + bank[j]
            if q_head[gb] < 0:
                q_head[gb] = sl
                if open_row[gb] == row[j]:  # a row hit: key `now`, first among equals
                    head[gb] = HIT << AGE_BITS
                else:
                    head[gb] = (max(s_e[sl], ready_t[gb]) << AGE_BITS) | (pos & AGE_MASK)
            else:
                s_next[q_tail[gb]] = sl
            q_tail[gb] = sl
            in_rank[rank[j]] += 1
            pos += 1
        gb_pick = pick_head(head, in_rank, rank_ready, now, r_lo, r_hi, nbank, ub, lim)
        sl = q_head[gb_pick]
        i = s_req[sl]
        e = s_e[sl]
        q_head[gb_pick] = s_next[sl]
        s_next[sl] = free_slot
        free_slot = sl
        in_rank[rank[i]] -= 1
        # book request i: PRE/ACT if its row is not open, then its bursts back to back on the data bus
        r = rank[i]
        gb = r * nbank + bank[i]
        bg = bank[i] >> bg_bits
        b = bursts[i]
        if open_row[gb] == row[i]:
            n_hit += 1
            tcol = max(e, act_t[gb] + tRCD)
        else:
            tact = max(max(e, ready_t[gb]), max(rank_act[r] + (tRRD_L if rank_act_bg[r] == bg else tRRD_S),
                                                faw[r, faw_ptr[r]] + tFAW))
            if open_row[gb] >= 0:
                tpre = max(e, tact - tRP)
                while cmd[bus, tpre & CMD_MASK] == tpre:
                    tpre += 1
                cmd[bus, tpre & CMD_MASK] = tpre
                tact = max(tact, tpre + tRP)
                n_pre += 1
            while cmd[bus, tact & CMD_MASK] == tact:
                tact += 1
            cmd[bus, tact & CMD_MASK] = tact
            faw[r, faw_ptr[r]] = tact
            faw_ptr[r] = (faw_ptr[r] + 1) & 3
            rank_act[r] = tact
            rank_ready[r] = max(faw[r, faw_ptr[r]] + tFAW, tact + tRRD_S)
            now = max(now, tact)
            rank_act_bg[r] = bg
            act_t[gb] = tact
            open_row[gb] = row[i]
            n_act += 1
            tcol = tact + tRCD
        tcol = max(max(tcol, col_floor), max(bg_next[r, bg], free - tCL))
        while cmd[bus, tcol & CMD_MASK] == tcol:  # the C/A slot is taken by a PRE/ACT: the burst slips
            tcol += 1
        cmd[bus, tcol & CMD_MASK] = tcol
        # the vector's bursts hit one bank group, spaced `gap` so another bank group's burst fills between (as the
        # detailed model spaces them); the bus is charged b·tBL, i.e. the interleaving is assumed to succeed
        for k in range(1, b):  # the other bursts' column commands, one per tBL as the bus is charged
            cmd[bus, (tcol + k * tBL) & CMD_MASK] = tcol + k * tBL
        tlast = tcol + (b - 1) * gap
        free = tcol + tCL + b * tBL
        bg_next[r, bg] = tlast + tCCD_L - (b - 1) * tBL  # interleaved: the next vector of this bank group
        ready_t[gb] = max(act_t[gb] + tRC, tlast + tRTP + tRP)
        n_rd += b
        ring[ring_in] = tlast
        ring_in = ring_in + 1 if ring_in + 1 < window else 0
        # FR within the bank: a queued request for the row now open moves to the front of the bank's queue
        prev = -1
        sl = q_head[gb]
        while sl >= 0 and row[s_req[sl]] != row[i]:
            prev = sl
            sl = s_next[sl]
        if sl >= 0 and prev >= 0:
            s_next[prev] = s_next[sl]
            if q_tail[gb] == sl:
                q_tail[gb] = prev
            s_next[sl] = q_head[gb]
            q_head[gb] = sl
        sl = q_head[gb]  # the bank's new head competes again
        if sl < 0:
            head[gb] = EMPTY
        elif open_row[gb] == row[s_req[sl]]:
            head[gb] = HIT << AGE_BITS
        else:
            head[gb] = (max(s_e[sl], ready_t[gb]) << AGE_BITS) | (s_age[sl] & AGE_MASK)
        served += 1
        finish[i] = tlast + tCL + tBL
        last = max(last, finish[i])
    if last >= lim >> (AGE_BITS + 1):
        raise ValueError("fast NMP model: a batch's emulated cycles exceed the packed-key range")
    bus_free[bus] = free
    stats[0] += n_hit
    stats[1] += n_act
    stats[2] += n_rd
    stats[3] += n_pre
    return last


@njit(cache=True, parallel=True)
def host_fast(order, starts, rank, bank, row, bursts, window, tp, banks_per_group, ranks, banks, bank_groups, finish,
              stats):
    """Host baseline, all channels in parallel: channel c serves order[starts[c]:starts[c + 1]] over its shared data
    bus. Returns each channel's last cycle."""
    channels = starts.shape[0] - 1
    cycles = np.zeros(channels, np.int64)
    earliest = np.zeros(rank.shape[0], np.int64)
    for c in prange(channels):
        if starts[c + 1] > starts[c]:
            st = _new_state(ranks, banks, bank_groups, window)
            cycles[c] = serve_fast(order, starts[c], starts[c + 1], rank, bank, row, bursts, earliest, NEVER, window,
                                   tp, banks_per_group, False, st, finish, stats[c])
    return cycles


@njit(cache=True, parallel=True)
def nmp_fast(send, pstart, packet_base, grouped, gstart, ranks, rank, bank, row, bursts, hit, psum, inst_cost, window,
             tp, banks_per_group, banks, bank_groups, packet_sync, finish, stats, packet_latency):
    """Near-memory execution, channels in parallel; the packet skeleton of timing.nmp_channel (instruction sends,
    one packet of buffering, barrier and psum return) with serve_fast for each (packet, rank) group of misses.
    send/pstart: lookups in C/A order and each packet's first send position; grouped/gstart: lookups per
    (packet, rank) group in service order; hit: per lookup. Returns each channel's last cycle."""
    tBL = tp[5]
    channels = packet_base.shape[0] - 1
    cycles = np.zeros(channels, np.int64)
    earliest = np.zeros(rank.shape[0], np.int64)
    for c in prange(channels):
        p0, p1 = packet_base[c], packet_base[c + 1]
        if p1 == p0:
            continue
        st = _new_state(ranks, banks, bank_groups, window)
        misses = np.empty(gstart[p1 * ranks] - gstart[p0 * ranks], np.int64)
        ca = 0
        barrier = 0
        psum_free = 0
        prev_start = 0
        for p in range(p0, p1):
            ca = max(ca, prev_start)
            first_send = ca
            prev_start = barrier
            done = barrier
            for k in range(pstart[p], pstart[p + 1]):
                i = send[k]
                ca += inst_cost[i]
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
        cycles[c] = max(psum_free, barrier)
    return cycles
