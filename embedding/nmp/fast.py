"""FAST fidelity level (NmpConfig.fidelity = "fast"): the same lookups, placement, packets, send order, RankCache
and byte accounting as the detailed model, with per-bank queues and a scoreboard instead of the window scan and
cycle-ring reservations.

What is identical to the detailed model: the address mapping (dram.placement; per lookup in one numba pass),
every byte counter but the host's C/A bytes (they follow the ACT/PRE counts, hence the row hits), the RankCache
hits (same LRU, same send order) and the packet skeleton (instruction sends, buffering, barrier, psum return). What is
approximated: the DRAM schedule inside a channel (host) or a rank's share of a packet (NMP); see fast_kernels.py.
Bookkeeping is O(n) numba (counting sorts), so a batch is emulated in a few passes over its lookups.
Validated against the detailed model in tests/nmp/test_nmp_fast.py and benchmarks/nmp_bench.py (fidelity table).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedding.nmp.config import BURST_BYTES, SYNC_MODES, NmpConfig, NmpConfigError
from embedding.nmp.dram import PAGE_BYTES, DecodedLookups, placement, scatter_params
from embedding.nmp.execute import LookupStream, ModeResult, RankCache, _locality_bits, _tensordimm_split
from embedding.nmp.fast_kernels import host_fast, nmp_fast
from embedding.nmp.fast_plan import decode, group_and_send, pair_order, psum_bursts

__all__ = ["map_lookups_fast", "emulate_host_fast", "emulate_nmp_fast", "emulate_batch_fast"]


def _log2(x: int) -> int:
    return int(x).bit_length() - 1


def map_lookups_fast(cfg: NmpConfig, stream: LookupStream) -> DecodedLookups:
    """dram.map_lookups in one numba pass (same fields, same values; same errors via dram.placement)."""
    g = cfg.geometry
    pl = placement(cfg, stream.table_rows, stream.row_bytes)
    col_bits = _log2(g.row_buffer_bytes // BURST_BYTES)
    if pl.granule_bits - 6 > col_bits:
        raise NmpConfigError(f"a {1 << pl.granule_bits} B vector does not fit a {g.row_buffer_bytes} B DRAM row")
    coloured = pl.colour is not None
    geo = np.array([g.channels, g.ranks_per_channel, g.banks_per_group, col_bits,
                    0 if coloured else _log2(g.channels), 0 if coloured else _log2(g.ranks_per_channel),
                    _log2(g.bank_groups), _log2(g.banks_per_group)], np.int64)
    frame_bits = _log2(g.capacity_bytes // PAGE_BYTES)
    mult, add, shift = scatter_params(frame_bits, cfg.seed)
    one = np.ones(1, np.int64)
    colour = pl.colour if coloured else np.full(1, -1, np.int64)
    spread = pl.spread if coloured else one
    block_bits = pl.block_bits if coloured else one
    n = stream.num_lookups
    out = [np.empty(n, np.int64) for _ in range(7)]
    decode(stream.tables, stream.rows, pl.bases, pl.stride, colour, spread, pl.step, block_bits, stream.row_bytes,
           geo, pl.granule_bits, cfg.mapping == "random", frame_bits, mult, add, shift, *out)
    return DecodedLookups(*out)


def _counters(stats: np.ndarray) -> tuple[int, int, int, int]:
    """(row hits, ACT, RD bursts, PRE) summed over channels."""
    s = stats.sum(axis=0)
    return int(s[0]), int(s[1]), int(s[2]), int(s[3])


def emulate_host_fast(cfg: NmpConfig, d: DecodedLookups, poolings: np.ndarray,
                      pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> ModeResult:
    """Host baseline: poolings in id order per channel, every burst over the channel data bus.
    pairs: fast_plan.pair_order's result for (d.channel, poolings) if already computed."""
    g = cfg.geometry
    n = d.row.size
    order = (pairs or _pairs(cfg, d, poolings))[0]
    starts = np.searchsorted(d.channel[order], np.arange(g.channels + 1)).astype(np.int64)
    tp = np.asarray(cfg.timing_vector(), np.int64)
    stats = np.zeros((g.channels, 4), np.int64)
    cycles = host_fast(order, starts, d.rank, d.bank, d.row, d.bursts, cfg.queue_entries, tp, g.banks_per_group,
                       g.ranks_per_channel, g.banks_per_rank, g.bank_groups, np.zeros(n, np.int64), stats)
    return _host_result(cfg, n, cycles, stats)


def _host_result(cfg: NmpConfig, n: int, cycles: np.ndarray, stats: np.ndarray) -> ModeResult:
    hits, acts, rd, pre = _counters(stats)
    return ModeResult(lookups=n, cycles=int(cycles.max(initial=0)), channel_data_bytes=float(rd * BURST_BYTES),
                      channel_cmd_bytes=(acts + rd + pre) * cfg.ca_bits_per_command / 8,
                      dram_bytes=float(rd * BURST_BYTES), acts=acts, precharges=pre, dram_accesses=n, row_hits=hits)


def _pairs(cfg: NmpConfig, d: DecodedLookups, poolings: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """fast_plan.pair_order of the lookups: (order, pair_of, pairs); span = largest pooling id + 1."""
    return pair_order(d.channel, poolings, int(poolings.max(initial=0)) + 1, cfg.geometry.channels)


def _pair_sequence(cfg: NmpConfig, pairs: np.ndarray, pair_channel: np.ndarray, first: np.ndarray,
                   d: DecodedLookups, tables: np.ndarray, poolings: np.ndarray) -> np.ndarray:
    """Each (channel, pooling) pair's issue position within its channel (execute.emulate_nmp's rule)."""
    chan_start = np.searchsorted(pair_channel, pair_channel)
    if not cfg.table_aware:
        return np.arange(pairs.size) - chan_start
    rpc = cfg.geometry.ranks_per_channel
    home = d.rank[first] if cfg.mode == "recnmp" else np.zeros(pairs.size, np.int64)
    by_home = np.lexsort((poolings[first], tables[first], home, pair_channel))
    pos = np.empty(pairs.size, np.int64)
    grp = pair_channel[by_home] * rpc + home[by_home]
    pos[by_home] = np.arange(pairs.size) - np.searchsorted(grp, grp, side="left")
    pair_order_ = np.lexsort((home, pos, pair_channel))
    seq = np.empty(pairs.size, np.int64)
    seq[pair_order_] = np.arange(pairs.size) - chan_start
    return seq


@dataclass(frozen=True)
class _NmpPlan:
    """What the NMP kernels take for one batch: packets, C/A send order, (packet, rank) groups, RankCache hits and
    partial sums (the numpy/numba bookkeeping of emulate_nmp_fast before any cycle is counted)."""

    d: DecodedLookups  # TensorDIMM: split into per-rank slices
    lookups: int
    send: np.ndarray
    pstart: np.ndarray
    packet_base: np.ndarray
    grouped: np.ndarray
    gstart: np.ndarray
    hit: np.ndarray
    psum: np.ndarray
    sends_inst: np.ndarray
    probes: int

    @property
    def n_packets(self) -> int:
        return int(self.packet_base[-1])


def _plan_nmp(cfg: NmpConfig, d: DecodedLookups, tables: np.ndarray, poolings: np.ndarray, row_bytes: np.ndarray,
              cache: RankCache, pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> _NmpPlan:
    g = cfg.geometry
    rpc = g.ranks_per_channel
    lookups = int(d.row.size)
    sends_inst = np.ones(lookups, np.bool_)
    if cfg.mode == "tensordimm":
        d, tables, poolings, sends_inst = _tensordimm_split(cfg, d, tables, poolings)
        pairs = None
    n = d.row.size
    span = int(poolings.max()) + 1
    order, pair_of, pairs = pairs or _pairs(cfg, d, poolings)
    pair_channel = pairs // span
    first = order[np.searchsorted(pair_of[order], np.arange(pairs.size))]  # lowest lookup index of each pair
    seq = _pair_sequence(cfg, pairs, pair_channel, first, d, tables, poolings)
    local_packet = seq // cfg.packet_poolings
    packets_per_channel = np.bincount(pair_channel, weights=None, minlength=g.channels)
    packets_per_channel = -(-packets_per_channel // cfg.packet_poolings)
    packet_base = np.concatenate(([0], np.cumsum(packets_per_channel))).astype(np.int64)
    n_packets = int(packet_base[-1])
    pair_packet = packet_base[pair_channel] + local_packet
    pair_rank = np.empty(pairs.size, np.int64)  # position of each pair in (channel, seq) order
    pair_rank[np.lexsort((seq, pair_channel))] = np.arange(pairs.size)
    grouped, gstart, send, pstart = group_and_send(order, pair_of, pair_rank, pair_packet, d.rank, n_packets, rpc)
    hit = np.zeros(n, np.bool_)
    probes = 0
    if cache.entries:  # no RankCache: no probes, every lookup goes to DRAM (skips the locality profiling too)
        flags = _locality_bits(d.key, cfg.hot_threshold)
        hit[send] = cache.filter(d.key[send], (d.channel * rpc + d.rank)[send], flags[send])
        probes = int(flags.sum())
    unit = d.rank // g.ranks_per_dimm if cfg.mode == "recnmp" else np.zeros(n, np.int64)
    psum = psum_bursts(order, pair_of, pair_packet, unit, g.dimms_per_channel, tables, row_bytes, n_packets)
    return _NmpPlan(d, lookups, send, pstart, packet_base, grouped, gstart, hit, psum, sends_inst, probes)


def _nmp_args(cfg: NmpConfig, pl: _NmpPlan) -> tuple:
    """The plan's arrays in nmp_fast's order, up to (not including) its kernel parameters."""
    d = pl.d
    return (pl.send, pl.pstart, pl.packet_base, pl.grouped, pl.gstart, cfg.geometry.ranks_per_channel, d.rank, d.bank,
            d.row, d.bursts, pl.hit, pl.psum, pl.sends_inst, *cfg.inst_cost)


def _nmp_result(cfg: NmpConfig, pl: _NmpPlan, cycles: np.ndarray, stats: np.ndarray, lat: np.ndarray) -> ModeResult:
    hits, acts, rd, pre = _counters(stats)
    n_hit = int(pl.hit.sum())
    return ModeResult(lookups=pl.lookups, cycles=int(cycles.max(initial=0)),
                      channel_data_bytes=float(pl.psum.sum() * BURST_BYTES),
                      channel_cmd_bytes=pl.lookups * cfg.inst_bits / 8, dram_bytes=float(rd * BURST_BYTES), acts=acts,
                      precharges=pre, dram_accesses=int(pl.d.row.size) - n_hit, row_hits=hits,
                      cache_probes=pl.probes, cache_hits=n_hit, packet_latency=lat)


def emulate_nmp_fast(cfg: NmpConfig, d: DecodedLookups, tables: np.ndarray, poolings: np.ndarray,
                     row_bytes: np.ndarray, cache: RankCache,
                     pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> ModeResult:
    """Near-memory pooling with execute.emulate_nmp's packets, send order and RankCache; fast DRAM timing.
    pairs: fast_plan.pair_order's result for (d.channel, poolings) if already computed (unused by TensorDIMM,
    which splits the lookups first)."""
    g = cfg.geometry
    pl = _plan_nmp(cfg, d, tables, poolings, row_bytes, cache, pairs)
    tp = np.asarray(cfg.timing_vector(), np.int64)
    stats = np.zeros((g.channels, 4), np.int64)
    lat = np.zeros(pl.n_packets, np.int64)
    cycles = nmp_fast(*_nmp_args(cfg, pl), cfg.queue_entries, tp, g.banks_per_group, g.banks_per_rank, g.bank_groups,
                      SYNC_MODES.index(cfg.packet_sync), np.zeros(pl.d.row.size, np.int64), stats, lat)
    return _nmp_result(cfg, pl, cycles, stats, lat)


def emulate_batch_fast(cfg: NmpConfig, stream: LookupStream, cache: RankCache | None = None
                       ) -> dict[str, ModeResult]:
    """execute.emulate_batch at the fast fidelity level."""
    d = map_lookups_fast(cfg, stream)
    pairs = _pairs(cfg, d, stream.poolings)  # one sort serves both modes
    out = {"host": emulate_host_fast(cfg, d, stream.poolings, pairs)}
    if cfg.mode != "host" and stream.num_lookups:
        if cache is None:
            cache = RankCache.for_config(cfg, stream.row_bytes)
        out["nmp"] = emulate_nmp_fast(cfg, d, stream.tables, stream.poolings, stream.row_bytes, cache, pairs)
    return out
