"""Configuration of the near-memory lookup emulator: DRAM geometry, DDR timings, placement, execution mode, energy.

One dataclass tree (`NmpConfig`) for the Hydra group `nmp`; every field is checked in `__post_init__` so a config
that exists can be emulated. Defaults are RecNMP's simulated system (Ke et al., ISCA 2020): DDR4-2400,
4 channels × 1 DIMM × 2 ranks, open page, FR-FCFS with 32-entry queues.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["DramGeometry", "DramTimings", "EnergyParams", "NmpConfig", "NmpConfigError", "MAPPINGS", "MODES",
           "FIDELITIES", "SYNC_MODES", "CA_PACKINGS", "NMP_INST_BITS", "BURST_BYTES"]

MAPPINGS = ("skylake", "random", "page_colour")
SYNC_MODES = ("off", "strict", "overlap")  # index = timing.SYNC_* code
MODES = ("host", "recnmp", "tensordimm")
FIDELITIES = ("detailed", "fast")  # see NmpConfig.fidelity
CA_PACKINGS = ("whole", "bits")  # see NmpConfig.ca_packing
NMP_INST_BITS = 79  # RecNMP instruction: DDR cmd, vsize, DRAM address, weight, locality bit, psum tag
BURST_BYTES = 64  # one burst: BL8 on a 64-bit DDR4 bus, BL16 on a 32-bit DDR5 sub-channel


class NmpConfigError(ValueError):
    """A DRAM or NMP configuration that cannot be emulated; the message names the offending field."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise NmpConfigError(message)


def _pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


@dataclass
class DramGeometry:
    """Organisation of the memory system. Every count must be a power of two (the mappings slice address bits)."""

    channels: int = 4
    dimms_per_channel: int = 1
    ranks_per_dimm: int = 2
    bank_groups: int = 4
    banks_per_group: int = 4
    rows: int = 65536
    columns: int = 1024
    """Columns per row, each `bus_bytes` wide: row buffer = columns × bus_bytes (8 KiB for a DDR4 x8 rank)."""
    bus_bytes: int = 8
    capacity_gib: float = 0.0
    """Declared total capacity; 0 derives it. A non-zero value must equal the product of the counts."""

    def __post_init__(self) -> None:
        for name in ("channels", "dimms_per_channel", "ranks_per_dimm", "bank_groups", "banks_per_group", "rows",
                     "columns", "bus_bytes"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value > 0, f"geometry.{name} must be a positive integer, got {value!r}")
            _require(_pow2(value), f"geometry.{name} must be a power of two, got {value}")
        _require(self.row_buffer_bytes >= BURST_BYTES, f"geometry: a row buffer of {self.row_buffer_bytes} B is "
                 f"smaller than one {BURST_BYTES} B burst")
        if self.capacity_gib:
            derived = self.capacity_bytes / 2**30
            _require(abs(derived - self.capacity_gib) < 1e-9, f"geometry does not multiply out: channels × DIMMs × "
                     f"ranks × banks × rows × row buffer = {derived:g} GiB, but capacity_gib = {self.capacity_gib:g}")

    @property
    def ranks_per_channel(self) -> int:
        return self.dimms_per_channel * self.ranks_per_dimm

    @property
    def total_ranks(self) -> int:
        return self.channels * self.ranks_per_channel

    @property
    def banks_per_rank(self) -> int:
        return self.bank_groups * self.banks_per_group

    @property
    def row_buffer_bytes(self) -> int:
        return self.columns * self.bus_bytes

    @property
    def rank_bytes(self) -> int:
        return self.banks_per_rank * self.rows * self.row_buffer_bytes

    @property
    def capacity_bytes(self) -> int:
        return self.total_ranks * self.rank_bytes


@dataclass
class DramTimings:
    """DDR timings in memory-clock cycles (DDR4-2400: 1200 MHz, tCK 0.833 ns)."""

    clock_mhz: float = 1200.0
    tRCD: int = 16
    tCL: int = 16
    tRP: int = 16
    tRC: int = 55
    tBL: int = 4
    """Data-bus cycles of one burst: burst_length transfers at double data rate (BL8: 4, BL16: 8)."""
    burst_length: int = 8
    """Transfers per burst (DDR4 BL8; DDR5 BL16). geometry.bus_bytes × burst_length must be one 64 B burst."""
    tCCD_S: int = 4
    tCCD_L: int = 6
    tRRD_S: int = 4
    tRRD_L: int = 6
    tFAW: int = 26
    tRTP: int = 9

    def __post_init__(self) -> None:
        _require(self.clock_mhz > 0, f"timings.clock_mhz must be > 0, got {self.clock_mhz}")
        for name in ("tRCD", "tCL", "tRP", "tRC", "tBL", "tCCD_S", "tCCD_L", "tRRD_S", "tRRD_L", "tFAW", "tRTP"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= 0, f"timings.{name} must be a non-negative integer number "
                     f"of cycles, got {value!r}")
        _require(self.tBL > 0, "timings.tBL must be > 0")
        _require(self.burst_length in (4, 8, 16, 32), f"timings.burst_length must be 4, 8, 16 or 32 transfers, got "
                 f"{self.burst_length!r}")
        _require(2 * self.tBL == self.burst_length, f"timings.tBL ({self.tBL}) must be burst_length / 2 = "
                 f"{self.burst_length // 2} cycles (two transfers per clock)")
        _require(self.tRC >= self.tRP, f"timings: tRC ({self.tRC}) must be ≥ tRP ({self.tRP}), tRAS = tRC − tRP")

    @property
    def tRAS(self) -> int:
        return self.tRC - self.tRP

    def as_array(self) -> list[int]:
        """Order used by the numba kernels (see timing.py)."""
        return [self.tRCD, self.tCL, self.tRP, self.tRC, self.tRAS, self.tBL, self.tCCD_S, self.tCCD_L, self.tRRD_S,
                self.tRRD_L, self.tFAW, self.tRTP]


@dataclass
class EnergyParams:
    """Memory energy per event (RecNMP's parameters)."""

    act_nj: float = 2.1
    rd_pj_per_bit: float = 14.0
    io_pj_per_bit: float = 22.0
    rankcache_pj_per_access: float = 50.0

    def __post_init__(self) -> None:
        for name in ("act_nj", "rd_pj_per_bit", "io_pj_per_bit", "rankcache_pj_per_access"):
            _require(getattr(self, name) >= 0, f"energy.{name} must be ≥ 0, got {getattr(self, name)}")


@dataclass
class NmpConfig:
    """Near-memory lookup emulation: what memory, where tables live, and how lookups execute."""

    enabled: bool = True
    """False (conf nmp=off): nothing is emulated."""
    mode: str = "recnmp"
    """host (baseline only), recnmp (rank-level pooling), tensordimm (vectors sliced across ranks)."""
    mapping: str = "page_colour"
    """skylake: tables contiguous, Skylake-like interleave; random: random 4 KiB frames + that interleave;
    page_colour: each table's pages in one rank (colour = table mod ranks)."""
    geometry: DramGeometry = field(default_factory=DramGeometry)
    timings: DramTimings = field(default_factory=DramTimings)
    energy: EnergyParams = field(default_factory=EnergyParams)
    queue_entries: int = 32
    """FR-FCFS window per channel (host) or per rank within a packet (NMP)."""
    packet_poolings: int = 16
    """Poolings per NMP packet (4-bit psum tag)."""
    packet_sync: str = "off"
    """How a packet waits for the slowest rank of the previous one (RecNMP: the slowest rank sets a packet's time).
    strict: no DRAM command of packet p+1 before every rank finished p. overlap: ranks decode buffered instructions
    and precharge/activate rows of p+1 early, but column reads (into the psum adder) wait for p to finish.
    off: each rank runs ahead on its own (no barrier). Booleans are accepted: true = strict, false = off."""
    ca_bits_per_cycle: float = 80
    """Channel C/A bits per memory cycle. NMP instructions cross it at the rate ca_packing gives (80: one 79-bit
    instruction per cycle; 160: two; 40: one per 2 cycles); a DDR command occupies ceil(ca_bits_per_command /
    ca_bits_per_cycle) cycles of it (host mode, and a rank's own command bus in NMP mode)."""
    ca_bits_per_command: float = 27
    """C/A bits of one DDR command (DDR4: 27 pins, one cycle; DDR5: 14 pins × 2 cycles = 28)."""
    inst_bits: float = NMP_INST_BITS
    """Bits of one NMP instruction (RecNMP: 79 = DDR cmd, vsize, DRAM address, weight, locality bit, psum tag).
    The three bit counts are whole numbers, typed float only so that a fractional one is refused by name here."""
    ca_packing: str = "whole"
    """How instructions fill the C/A bus. whole: an instruction does not straddle a cycle boundary, so a cycle
    carries floor(ca_bits_per_cycle / inst_bits) instructions, or one takes ceil(inst_bits / ca_bits_per_cycle)
    cycles; bits: instructions are streamed bit-serially, inst_bits / ca_bits_per_cycle cycles each (120 bits:
    1.52 instructions per cycle)."""
    rankcache_bytes: int = 0
    """Per-rank RankCache capacity (LRU, one entry per vector); 0 disables it."""
    hot_threshold: int = 0
    """Locality bit set for indices seen more than this many times in a batch; 0 marks every lookup."""
    table_aware: bool = False
    """Table-aware packet scheduling: each rank walks its tables one at a time, packets still span all ranks."""
    seed: int = 0
    """Seed of the random page placement."""
    fidelity: str = "detailed"
    """detailed: FR-FCFS scheduling with cycle-ring bus reservations (timing.py), the reference model. fast: the
    same pick rule over per-bank queues and a scoreboard without reservations (fast.py): bytes identical, speedups
    within 5% of detailed (measured ≤ 2.3%, tests/nmp/test_nmp_fast.py), 2-3× the emulation rate. Default
    detailed, because the published validation figures are its; choose fast for full traces and wide sweeps."""

    def __post_init__(self) -> None:
        _require(self.mode in MODES, f"nmp.mode {self.mode!r} is not one of {MODES}")
        _require(self.mapping in MAPPINGS, f"nmp.mapping {self.mapping!r} is not one of {MAPPINGS}")
        if isinstance(self.geometry, dict):  # plain dicts from YAML or kwargs
            self.geometry = DramGeometry(**self.geometry)
        if isinstance(self.timings, dict):
            self.timings = DramTimings(**self.timings)
        if isinstance(self.energy, dict):
            self.energy = EnergyParams(**self.energy)
        if isinstance(self.packet_sync, bool):
            self.packet_sync = "strict" if self.packet_sync else "off"
        _require(self.geometry.bus_bytes * self.timings.burst_length == BURST_BYTES, f"geometry.bus_bytes "
                 f"({self.geometry.bus_bytes}) × timings.burst_length ({self.timings.burst_length}) must be one "
                 f"{BURST_BYTES} B burst (DDR4: 8 B × BL8; DDR5 sub-channel: 4 B × BL16)")
        _require(self.fidelity in FIDELITIES, f"nmp.fidelity {self.fidelity!r} is not one of {FIDELITIES}")
        _require(self.packet_sync in SYNC_MODES, f"nmp.packet_sync {self.packet_sync!r} is not one of {SYNC_MODES}")
        _require(self.queue_entries >= 1, f"nmp.queue_entries must be ≥ 1, got {self.queue_entries}")
        _require(1 <= self.packet_poolings <= 16, f"nmp.packet_poolings must be in 1..16 (4-bit psum tag), got "
                 f"{self.packet_poolings}")
        for name, top in (("ca_bits_per_cycle", 4096), ("ca_bits_per_command", 256), ("inst_bits", 1024)):
            value = getattr(self, name)
            ok = isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()
            _require(ok and 1 <= value <= top, f"nmp.{name} must be a whole number of bits in 1..{top}, got "
                     f"{value!r}")
            setattr(self, name, int(value))
        _require(self.ca_packing in CA_PACKINGS, f"nmp.ca_packing {self.ca_packing!r} is not one of {CA_PACKINGS}")
        _require(self.rankcache_bytes >= 0, f"nmp.rankcache_bytes must be ≥ 0, got {self.rankcache_bytes}")
        _require(self.hot_threshold >= 0, f"nmp.hot_threshold must be ≥ 0, got {self.hot_threshold}")

    @property
    def inst_cost(self) -> tuple[int, int]:
        """(num, den): one NMP instruction holds the C/A bus num/den cycles (see ca_packing)."""
        w, i = self.ca_bits_per_cycle, self.inst_bits
        if self.ca_packing == "bits":
            g = math.gcd(w, i)
            return i // g, w // g
        return (1, w // i) if w >= i else (-(-i // w), 1)

    @property
    def inst_per_cycle(self) -> float:
        """NMP instructions the C/A bus carries per memory cycle."""
        num, den = self.inst_cost
        return den / num

    @property
    def cmd_cycles(self) -> int:
        """C/A cycles one DDR command occupies."""
        return -(-self.ca_bits_per_command // self.ca_bits_per_cycle)

    def timing_vector(self) -> list[int]:
        """DramTimings.as_array() followed by cmd_cycles: the `tp` vector of the numba kernels."""
        return self.timings.as_array() + [self.cmd_cycles]
