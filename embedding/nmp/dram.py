"""Physical placement of embedding rows and the address mapping onto channel / rank / bank / row / column.

Vectorised numpy: every lookup is mapped in one pass. Tables are laid out with rows padded to a power-of-two
stride (≥ 64 B), each table starting on a 4 KiB page. The decoded fields are what the timing kernels consume.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedding.nmp.config import BURST_BYTES, NmpConfig, NmpConfigError

__all__ = ["DecodedLookups", "Placement", "map_lookups", "placement", "row_strides", "scatter_params"]

PAGE_BYTES = 4096
_GRANULE_MIN_BITS = 8  # Skylake-like channel interleave at 256 B


@dataclass(frozen=True)
class DecodedLookups:
    channel: np.ndarray  # (N,) int64
    rank: np.ndarray  # (N,) int64, rank within the channel (dimm × ranks_per_dimm + rank)
    bank: np.ndarray  # (N,) int64, bank within the rank (bank_group × banks_per_group + bank)
    row: np.ndarray  # (N,) int64
    column: np.ndarray  # (N,) int64, first burst's column (in bursts)
    bursts: np.ndarray  # (N,) int64, BL8 bursts per vector
    key: np.ndarray  # (N,) int64, physical vector address / stride: identifies a vector for the RankCache


def row_strides(row_bytes: np.ndarray) -> np.ndarray:
    """Bytes a row occupies in memory: next power of two ≥ max(row bytes, one burst)."""
    rb = np.maximum(np.asarray(row_bytes, dtype=np.int64), BURST_BYTES)
    return (1 << np.ceil(np.log2(rb)).astype(np.int64)).astype(np.int64)


def _bits(x: int) -> int:
    return int(x).bit_length() - 1


def _table_bases(sizes: np.ndarray) -> np.ndarray:
    """Start of each table when packed one after another on 4 KiB pages."""
    pages = -(-sizes // PAGE_BYTES)
    bases = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(pages[:-1] * PAGE_BYTES, out=bases[1:])
    return bases


def _decode(addr: np.ndarray, cfg: NmpConfig, channel_bits: int, rank_bits: int, granule_bits: int):
    """Skylake-like bit slicing, low to high: burst offset, column-low (within the interleave granule), channel,
    bank group, column-high, bank, rank, row. Channel, bank group and bank are XOR-hashed with row bits so that
    strided tables still spread (as Intel's address hashing does)."""
    g = cfg.geometry
    line = addr >> 6  # in bursts
    col_low_bits = granule_bits - 6
    col_bits = _bits(g.row_buffer_bytes // BURST_BYTES)
    if col_low_bits > col_bits:
        raise NmpConfigError(f"a {1 << granule_bits} B vector does not fit a {g.row_buffer_bytes} B DRAM row")
    bg_bits, bk_bits = _bits(g.bank_groups), _bits(g.banks_per_group)
    pos = 0
    col_low = line & ((1 << col_low_bits) - 1)
    pos += col_low_bits
    channel = (line >> pos) & ((1 << channel_bits) - 1)
    pos += channel_bits
    bg = (line >> pos) & ((1 << bg_bits) - 1)
    pos += bg_bits
    col_high = (line >> pos) & ((1 << (col_bits - col_low_bits)) - 1)
    pos += col_bits - col_low_bits
    bank = (line >> pos) & ((1 << bk_bits) - 1)
    pos += bk_bits
    rank = (line >> pos) & ((1 << rank_bits) - 1)
    pos += rank_bits
    row = line >> pos
    channel ^= row & ((1 << channel_bits) - 1)
    bg ^= (row >> channel_bits) & ((1 << bg_bits) - 1)
    bank ^= (row >> (channel_bits + bg_bits)) & ((1 << bk_bits) - 1)
    column = col_low | (col_high << col_low_bits)
    return channel, rank, bg * g.banks_per_group + bank, row, column


def scatter_params(frame_bits: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Multipliers, addends and xor-shift of the seeded page scatter (see `_scatter_pages`)."""
    rng = np.random.default_rng(seed)
    mult, add = np.empty(3, np.int64), np.empty(3, np.int64)
    for k in range(3):
        mult[k] = int(rng.integers(1, 1 << 30)) | 1
        add[k] = int(rng.integers(0, 1 << 30))
    return mult, add, max(1, frame_bits // 2)


def _scatter_pages(pages: np.ndarray, frame_bits: int, seed: int) -> np.ndarray:
    """A seeded bijection of page numbers onto frames in [0, 2^frame_bits): random-looking placement without
    materialising a permutation of every frame (affine maps with odd multipliers and xor-shifts are invertible)."""
    mult, add, shift = scatter_params(frame_bits, seed)
    mask = np.int64((1 << frame_bits) - 1)
    x = pages.astype(np.int64) & mask
    for k in range(3):
        x = (x * mult[k] + add[k]) & mask
        x ^= x >> shift
    return x


@dataclass(frozen=True)
class Placement:
    """Where every table lives: the per-table half of the mapping (the per-lookup half is `map_lookups`).

    Page colouring with fewer tables than ranks spreads a table over several ranks: table t owns the colours
    colour[t] + k·step for k < spread[t], and its block b (block_bits[t]: a 4 KiB page, or one row if rows are
    larger) lives in colour colour[t] + (b mod spread[t])·step at rank-local block b // spread[t]. A pooling's
    rows then fall on several ranks (one partial sum per DIMM touched), and every rank holds work."""

    bases: np.ndarray  # (T,) int64, byte address of row 0 (rank-local for page colouring)
    stride: np.ndarray  # (T,) int64, bytes between consecutive rows
    colour: np.ndarray | None  # (T,) int64 first global rank of each table (page colouring), else None
    granule_bits: int  # log2 of the channel-interleave granule
    spread: np.ndarray | None = None  # (T,) int64 ranks each table is spread over (page colouring), else None
    step: int = 1  # colour distance between a spread table's ranks (= the number of tables)
    block_bits: np.ndarray | None = None  # (T,) int64 log2 of a spread table's block (page or row)

    def ranks_holding_data(self, total_ranks: int) -> int:
        """Distinct ranks that hold at least one table's rows (all of them when the mapping interleaves)."""
        if self.colour is None:
            return total_ranks
        held = set()
        for c, k in zip(self.colour.tolist(), self.spread.tolist(), strict=True):
            held.update(c + j * self.step for j in range(k))
        return len(held)

    def local_address(self, tables: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(address, global rank): rank-local byte address and colour of each lookup under page colouring; the
        plain address and None otherwise."""
        off = rows * self.stride[tables]
        if self.colour is None:
            return self.bases[tables] + off, None
        bb = self.block_bits[tables]
        k = self.spread[tables]
        block = off >> bb
        local = self.bases[tables] + ((block // k) << bb) + (off & ((np.int64(1) << bb) - 1))
        return local, self.colour[tables] + (block % k) * self.step


def placement(cfg: NmpConfig, table_rows: np.ndarray, row_bytes: np.ndarray) -> Placement:
    """Lay the tables out under `cfg.mapping`. Raises NmpConfigError if they do not fit (in total, or per rank
    for page colouring)."""
    g = cfg.geometry
    table_rows = np.asarray(table_rows, dtype=np.int64)
    stride = row_strides(row_bytes)
    sizes = table_rows * stride
    granule_bits = max(_GRANULE_MIN_BITS, _bits(int(stride.max())))
    if cfg.mapping == "page_colour":
        n_tables = len(table_rows)
        colour = np.arange(n_tables, dtype=np.int64) % g.total_ranks
        # fewer tables than ranks: table t also takes the colours t + k·T, so that every rank holds rows
        spread = np.maximum(1, (g.total_ranks - colour + n_tables - 1) // n_tables) if n_tables < g.total_ranks \
            else np.ones(n_tables, np.int64)
        block_bits = np.maximum(_bits(PAGE_BYTES), np.log2(stride).astype(np.int64))
        blocks = -(-sizes // (np.int64(1) << block_bits))
        local_sizes = -(-blocks // spread) << block_bits  # bytes of each table on each of its ranks
        # each colour's tables packed one after another on 4 KiB pages, in table order (_table_bases per colour)
        by_colour = np.argsort(colour, kind="stable")
        pages = -(-local_sizes[by_colour] // PAGE_BYTES) * PAGE_BYTES
        ends = np.cumsum(pages)
        first = np.searchsorted(colour[by_colour], colour[by_colour])  # first position of each one's colour
        starts = ends - pages
        bases = np.empty(n_tables, dtype=np.int64)
        bases[by_colour] = starts - starts[first]
        used = bases + local_sizes
        over = np.flatnonzero(used > g.rank_bytes)
        if over.size:
            c = int(colour[over[0]])
            members = np.flatnonzero(colour == c)
            raise NmpConfigError(f"mapping exceeds capacity: tables {members.tolist()[:8]} coloured to rank {c} "
                                 f"need {used[members].max() / 2**30:.3g} GiB, a rank holds "
                                 f"{g.rank_bytes / 2**30:.3g} GiB")
        return Placement(bases, stride, colour, granule_bits, spread.astype(np.int64), n_tables, block_bits)
    bases = _table_bases(sizes)
    total = int(bases[-1] + sizes[-1])
    if total > g.capacity_bytes:
        raise NmpConfigError(f"mapping exceeds capacity: tables need {total / 2**30:.3g} GiB, memory holds "
                             f"{g.capacity_bytes / 2**30:.3g} GiB")
    return Placement(bases, stride, None, granule_bits)


def map_lookups(cfg: NmpConfig, tables: np.ndarray, rows: np.ndarray, table_rows: np.ndarray,
                row_bytes: np.ndarray) -> DecodedLookups:
    """Decode lookups (table id, row id) into DRAM coordinates under `cfg.mapping`.

    Raises NmpConfigError if the tables do not fit (in total, or per rank for page colouring).
    """
    g = cfg.geometry
    pl = placement(cfg, table_rows, row_bytes)
    granule_bits = pl.granule_bits
    tables = np.asarray(tables, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    addr, glob = pl.local_address(tables, rows)
    phys = addr
    if glob is not None:
        _, _, bank, row, column = _decode(addr, cfg, 0, 0, granule_bits)
        channel, rank = glob % g.channels, glob // g.channels
    else:
        if cfg.mapping == "random":
            frame_bits = _bits(g.capacity_bytes // PAGE_BYTES)
            addr = (_scatter_pages(addr >> 12, frame_bits, cfg.seed) << 12) | (addr & (PAGE_BYTES - 1))
        channel, rank, bank, row, column = _decode(addr, cfg, _bits(g.channels), _bits(g.ranks_per_channel),
                                                   granule_bits)
    bursts = -(-np.asarray(row_bytes, dtype=np.int64)[tables] // BURST_BYTES)
    key = (phys >> 6) * np.int64(g.total_ranks) + (channel * g.ranks_per_channel + rank)
    return DecodedLookups(channel, rank, bank, row, column, bursts, key)
