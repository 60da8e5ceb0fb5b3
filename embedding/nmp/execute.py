"""Two execution modes over one lookup stream: the host baseline and near-memory pooling (RecNMP / TensorDIMM).

Numpy does the bookkeeping (placement, packets, send order, locality bits); the numba kernels in timing.py do the
cycle accounting, all channels in one parallel call (channels are independent; a batch ends when its slowest
channel ends). Orderings use O(n) counting sorts (channels.stable_order) with lexsort's exact tie-breaking.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import typed, types

from embedding.nmp.channels import host_channels, nmp_channels, stable_order
from embedding.nmp.config import BURST_BYTES, SYNC_MODES, NmpConfig, NmpConfigError
from embedding.nmp.dram import DecodedLookups, map_lookups, row_strides
from embedding.nmp.timing import lru_filter

__all__ = ["LookupStream", "ModeResult", "RankCache", "emulate_host", "emulate_nmp", "emulate_batch"]


@dataclass(frozen=True)
class LookupStream:
    """One batch of lookups: lookup i reads row rows[i] of table tables[i] for pooling poolings[i].

    Poolings are served in increasing id order (the order the host issues them); table_rows and row_bytes
    describe every table (index = table id).
    """

    tables: np.ndarray  # (N,) int64
    rows: np.ndarray  # (N,) int64
    poolings: np.ndarray  # (N,) int64
    table_rows: np.ndarray  # (T,) int64
    row_bytes: np.ndarray  # (T,) int64

    def __post_init__(self) -> None:
        n = self.tables.shape[0]
        if self.rows.shape != (n,) or self.poolings.shape != (n,):
            raise NmpConfigError(f"lookup arrays differ in length: tables {self.tables.shape}, rows "
                                 f"{self.rows.shape}, poolings {self.poolings.shape}")
        if self.table_rows.shape != self.row_bytes.shape or self.table_rows.size == 0:
            raise NmpConfigError("table_rows and row_bytes must list the same, non-zero number of tables")
        if np.any(self.row_bytes <= 0) or np.any(self.table_rows <= 0):
            raise NmpConfigError("every table needs rows > 0 and row_bytes > 0")
        if n and (self.tables.min() < 0 or self.tables.max() >= self.table_rows.size):
            raise NmpConfigError(f"table ids must lie in [0, {self.table_rows.size})")
        if n and (self.rows.min() < 0 or np.any(self.rows >= self.table_rows[self.tables])):
            raise NmpConfigError("a row id lies outside its table")
        if n and self.poolings.min() < 0:
            raise NmpConfigError("pooling ids must be ≥ 0")

    @classmethod
    def from_arrays(cls, tables, rows, poolings, table_rows, row_bytes) -> LookupStream:
        as64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
        return cls(as64(tables), as64(rows), as64(poolings), as64(table_rows), as64(row_bytes))

    @classmethod
    def from_batch(cls, batch, table_rows, row_bytes) -> LookupStream:
        """From a table-major CSR `embedding.batch.Batch`: one pooling per bag (t, b), numbered sample-major
        (b·T + t) because the SLS operators of all tables run concurrently on the host."""
        t_count, b_count = batch.lengths.shape
        lengths = batch.lengths.ravel()
        tables = np.repeat(np.arange(t_count, dtype=np.int64), batch.lengths.sum(axis=1))
        bag = np.repeat(np.arange(t_count * b_count, dtype=np.int64), lengths)
        poolings = (bag % b_count) * t_count + bag // b_count
        return cls.from_arrays(tables, batch.indices, poolings, table_rows, row_bytes)

    @property
    def num_lookups(self) -> int:
        return int(self.tables.size)


@dataclass
class ModeResult:
    """Counters of one execution mode over one batch (cycles are memory-clock cycles)."""

    lookups: int
    cycles: int
    channel_data_bytes: float
    channel_cmd_bytes: float
    dram_bytes: float
    acts: int
    precharges: int
    dram_accesses: int
    row_hits: int
    cache_probes: int = 0
    cache_hits: int = 0
    packet_latency: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class RankCache:
    """Per-rank LRU RankCache state, kept across batches (one entry per vector)."""

    def __init__(self, ranks: int, entries: int):
        self.entries = entries
        self.table = typed.Dict.empty(key_type=types.int64, value_type=types.int64)
        self.slot_key = np.zeros((ranks, max(entries, 1)), np.int64)
        self.prv = np.full((ranks, max(entries, 1)), -1, np.int64)
        self.nxt = np.full((ranks, max(entries, 1)), -1, np.int64)
        self.head = np.full(ranks, -1, np.int64)
        self.tail = np.full(ranks, -1, np.int64)
        self.size = np.zeros(ranks, np.int64)

    @classmethod
    def for_config(cls, cfg: NmpConfig, row_bytes: np.ndarray) -> RankCache:
        """Entries = rankcache_bytes / the largest vector a rank stores (a TensorDIMM rank holds 1/R of it)."""
        entry = int(row_strides(row_bytes).max())
        if cfg.mode == "tensordimm":
            entry = max(BURST_BYTES, entry // cfg.geometry.ranks_per_channel)
        return cls(cfg.geometry.total_ranks, cfg.rankcache_bytes // entry)

    def filter(self, keys: np.ndarray, ranks: np.ndarray, flags: np.ndarray) -> np.ndarray:
        hit = np.zeros(keys.shape[0], np.bool_)
        if self.entries > 0:
            lru_filter(keys, ranks, flags, self.entries, self.table, self.slot_key, self.prv, self.nxt, self.head,
                       self.tail, self.size, hit)
        return hit


def _bounds(sorted_ids: np.ndarray, count: int) -> np.ndarray:
    return np.searchsorted(sorted_ids, np.arange(count + 1)).astype(np.int64)


def emulate_host(cfg: NmpConfig, d: DecodedLookups, poolings: np.ndarray) -> ModeResult:
    """Host baseline: poolings in id order, FR-FCFS per channel, every burst crosses the channel data bus."""
    g = cfg.geometry
    order = np.lexsort((poolings, d.channel))
    starts = _bounds(d.channel[order], g.channels)
    tp = np.asarray(cfg.timing_vector(), np.int64)
    stats = np.zeros((g.channels, 4), np.int64)
    finish = np.zeros(d.row.size, np.int64)
    cycles = host_channels(order, starts, d.rank, d.bank, d.row, d.bursts, cfg.queue_entries, tp, g.banks_per_group,
                           g.ranks_per_channel, g.banks_per_rank, g.bank_groups, finish, stats).max(initial=0)
    stats = stats.sum(axis=0)
    commands = int(stats[1] + stats[2] + stats[3])
    return ModeResult(lookups=int(d.row.size), cycles=int(cycles), channel_data_bytes=float(stats[2] * BURST_BYTES),
                      channel_cmd_bytes=commands * cfg.ca_bits_per_command / 8, dram_bytes=float(stats[2] * BURST_BYTES),
                      acts=int(stats[1]), precharges=int(stats[3]), dram_accesses=int(d.row.size),
                      row_hits=int(stats[0]))


def _locality_bits(key: np.ndarray, threshold: int) -> np.ndarray:
    """Hot-entry profiling: the locality bit is set for vectors looked up more than `threshold` times."""
    if threshold == 0:
        return np.ones(key.size, np.bool_)
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    return counts[inverse] > threshold


def _tensordimm_split(cfg: NmpConfig, d: DecodedLookups, tables: np.ndarray, poolings: np.ndarray):
    """TensorDIMM: each vector's 64 B slices are spread over all ranks of its channel (rank k holds slices
    k, k + R, ...); every rank reads its slices at the same rank-local address."""
    ranks = cfg.geometry.ranks_per_channel
    parts = np.minimum(d.bursts, ranks)
    src = np.repeat(np.arange(d.row.size), parts)
    k = np.arange(src.size) - np.repeat(np.cumsum(parts) - parts, parts)
    bursts = d.bursts[src] // ranks + (k < d.bursts[src] % ranks)
    sub = DecodedLookups(d.channel[src], k, d.bank[src], d.row[src], d.column[src], bursts,
                         d.key[src] * ranks + k)
    return sub, tables[src], poolings[src], (k == 0)


def emulate_nmp(cfg: NmpConfig, d: DecodedLookups, tables: np.ndarray, poolings: np.ndarray,
                row_bytes: np.ndarray, cache: RankCache, trace: dict | None = None) -> ModeResult:
    """Near-memory pooling: per channel, packets of ≤ packet_poolings poolings, instructions sent round-robin
    over the ranks, DRAM work per rank (FR-FCFS within the packet), RankCache hits skip DRAM.
    trace: if a dict, it receives per lookup in send order its channel, rank, global packet, bursts, hit and
    finish cycle (the counters sync_study reads)."""
    g = cfg.geometry
    rpc = g.ranks_per_channel
    lookups = int(d.row.size)
    sends_inst = np.ones(lookups, np.bool_)
    if cfg.mode == "tensordimm":
        d, tables, poolings, sends_inst = _tensordimm_split(cfg, d, tables, poolings)
    n = d.row.size
    # packets: (channel, pooling) pairs in issue order, 16 per packet and channel
    span = int(poolings.max()) + 1
    pair_key = d.channel * span + poolings
    present = np.bincount(pair_key, minlength=g.channels * span) > 0  # dense: keys < channels × poolings
    pairs = np.flatnonzero(present)
    pair_of = (np.cumsum(present) - 1)[pair_key]
    pair_channel = pairs // span
    if cfg.table_aware:
        first = np.full(pairs.size, n, np.int64)
        np.minimum.at(first, pair_of, np.arange(n))
        home = d.rank[first] if cfg.mode == "recnmp" else np.zeros(pairs.size, np.int64)
        by_home = np.lexsort((poolings[first], tables[first], home, pair_channel))
        pos = np.empty(pairs.size, np.int64)
        grp = pair_channel[by_home] * rpc + home[by_home]
        gstart = np.searchsorted(grp, grp, side="left")
        pos[by_home] = np.arange(pairs.size) - gstart
        pair_order = np.lexsort((home, pos, pair_channel))
    else:
        pair_order = np.arange(pairs.size)  # np.unique sorted them by (channel, pooling)
    seq = np.empty(pairs.size, np.int64)
    seq[pair_order] = np.arange(pairs.size) - np.searchsorted(pair_channel[pair_order], pair_channel[pair_order])
    local_packet = seq // cfg.packet_poolings
    packets_per_channel = np.zeros(g.channels, np.int64)
    np.maximum.at(packets_per_channel, pair_channel, local_packet + 1)
    packet_base = np.concatenate(([0], np.cumsum(packets_per_channel)))
    packet = (packet_base[pair_channel] + local_packet)[pair_of]  # (n,) global packet id
    # send order: within a packet, round-robin over ranks, each rank's lookups in pooling order
    n_packets = int(packet_base[-1])
    within = stable_order(seq[pair_of], int(seq.max()) + 1)  # = lexsort((arange, seq, rank, packet))
    within = within[stable_order((packet * rpc + d.rank)[within], n_packets * rpc)]
    grp = packet[within] * rpc + d.rank[within]
    rr = np.empty(n, np.int64)
    rr[within] = np.arange(n) - np.searchsorted(grp, grp)
    send = stable_order(d.rank, rpc)  # = lexsort((rank, rr, packet))
    send = send[stable_order(rr[send], int(rr.max()) + 1)]
    send = send[stable_order(packet[send], n_packets)]
    flags = _locality_bits(d.key, cfg.hot_threshold)
    hit = cache.filter(d.key[send], (d.channel * rpc + d.rank)[send], flags[send])
    # per-packet psums: one vector per (pooling, DIMM) touched for RecNMP, per (pooling, channel) for TensorDIMM
    unit = d.rank // g.ranks_per_dimm if cfg.mode == "recnmp" else np.zeros(n, np.int64)
    psum_key = np.flatnonzero(np.bincount(pair_of * g.dimms_per_channel + unit,
                                          minlength=pairs.size * g.dimms_per_channel))  # (pair, unit) touched
    psum_pair = psum_key // g.dimms_per_channel
    pair_packet = packet_base[pair_channel] + local_packet
    pool_table = np.zeros(span, np.int64)
    pool_table[poolings] = tables
    psum_b = -(-row_bytes[pool_table[pairs[psum_pair] % span]] // BURST_BYTES)
    psum_bursts = np.bincount(pair_packet[psum_pair], weights=psum_b, minlength=n_packets).astype(np.int64)

    tp = np.asarray(cfg.timing_vector(), np.int64)
    sp, sr = packet[send], d.rank[send]
    packet_starts = _bounds(sp, n_packets)
    miss = np.flatnonzero(~hit)
    gkey = sp[miss] * rpc + sr[miss]
    by_group = stable_order(gkey, n_packets * rpc)
    group_order = miss[by_group]
    group_starts = _bounds(gkey[by_group], n_packets * rpc)
    num, den = cfg.inst_cost
    cost = np.where(sends_inst[send], num, 0).astype(np.int64)
    stats = np.zeros((g.channels, 4), np.int64)
    finish = np.zeros(n, np.int64)
    lat = np.zeros(n_packets, np.int64)
    cycles = nmp_channels(_bounds(d.channel[send], g.channels), packet_base, packet_starts, group_order, group_starts,
                          rpc, sr, d.bank[send], d.row[send], d.bursts[send], hit, psum_bursts, cost, den,
                          cfg.queue_entries, tp, g.banks_per_group, g.banks_per_rank, g.bank_groups,
                          SYNC_MODES.index(cfg.packet_sync),
                          finish, stats, lat).max(initial=0)
    if trace is not None:
        trace.update(channel=d.channel[send], rank=sr, packet=sp, bursts=d.bursts[send], hit=hit, finish=finish,
                     packet_base=packet_base)
    stats = stats.sum(axis=0)
    psum_bytes = float(psum_bursts.sum() * BURST_BYTES)
    return ModeResult(lookups=lookups, cycles=int(cycles), channel_data_bytes=psum_bytes,
                      channel_cmd_bytes=lookups * cfg.inst_bits / 8, dram_bytes=float(stats[2] * BURST_BYTES),
                      acts=int(stats[1]), precharges=int(stats[3]), dram_accesses=int(n - hit.sum()),
                      row_hits=int(stats[0]), cache_probes=int(flags.sum()) if cache.entries else 0,
                      cache_hits=int(hit.sum()), packet_latency=lat)


def emulate_batch(cfg: NmpConfig, stream: LookupStream, cache: RankCache | None = None) -> dict[str, ModeResult]:
    """Run the host baseline and (unless cfg.mode == 'host') the NMP mode over one batch."""
    if cfg.fidelity == "fast":  # fidelity dispatch: the scoreboard model of fast.py
        from embedding.nmp.fast import emulate_batch_fast
        return emulate_batch_fast(cfg, stream, cache)
    d = map_lookups(cfg, stream.tables, stream.rows, stream.table_rows, stream.row_bytes)
    out = {"host": emulate_host(cfg, d, stream.poolings)}
    if cfg.mode != "host" and stream.num_lookups:
        if cache is None:
            cache = RankCache.for_config(cfg, stream.row_bytes)
        out["nmp"] = emulate_nmp(cfg, d, stream.tables, stream.poolings, stream.row_bytes, cache)
    return out
