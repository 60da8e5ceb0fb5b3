"""Emulate whole runs (several batches) and turn the counters into the project's metric dicts.

`run_nmp(cfg, spec, batches)` is the entry the harness calls for `dlrmbench run nmp=...`; `emulate_streams` takes
plain `LookupStream`s so that tests and the validation benchmark need no `Batch`.
"""
from __future__ import annotations

import math

import numpy as np

from embedding.nmp.bounds import Bound, host_lower_bound, nmp_lower_bound
from embedding.nmp.config import NmpConfig
from embedding.nmp.dram import placement
from embedding.nmp.execute import LookupStream, ModeResult, RankCache, emulate_batch
from embedding.nmp.fast import map_lookups_fast

__all__ = ["energy_nj", "emulate_streams", "speedup_bounds", "summarise", "run_nmp"]


def energy_nj(cfg: NmpConfig, r: ModeResult) -> float:
    """Memory energy: ACT × E_act + DRAM bits read × E_rd + bits over the channel (data and C/A) × E_io
    + RankCache accesses × E_cache (RecNMP's parameters)."""
    e = cfg.energy
    io_bits = 8 * (r.channel_data_bytes + r.channel_cmd_bytes)
    return (r.acts * e.act_nj + 8 * r.dram_bytes * e.rd_pj_per_bit / 1e3 + io_bits * e.io_pj_per_bit / 1e3
            + r.cache_probes * e.rankcache_pj_per_access / 1e3)


def emulate_streams(cfg: NmpConfig, streams: list[LookupStream]) -> list[dict[str, ModeResult]]:
    """Emulate batches in order; the RankCache state carries over from batch to batch."""
    if not streams:
        return []
    cache = RankCache.for_config(cfg, streams[0].row_bytes) if cfg.mode != "host" else None
    return [emulate_batch(cfg, s, cache) for s in streams]


def _metric(name: str, value: float, unit: str, method: str, samples: list[float] | None = None) -> dict:
    m = {"name": name, "value": float(value), "unit": unit, "method": method}
    if samples is not None and len(samples) > 1:
        a = np.asarray(samples, dtype=float)
        m.update(median=float(np.median(a)), p90=float(np.percentile(a, 90)), min=float(a.min()),
                 max=float(a.max()), repeats=int(a.size))
    return m


def speedup_bounds(cfg: NmpConfig, streams: list[LookupStream], results: list[dict[str, ModeResult]]
                   ) -> tuple[float, Bound, Bound] | None:
    """(speedup bound, host bound, NMP bound of the batch with the most NMP bound cycles) over the batches: emulated
    host cycles / the NMP lower bound (bounds.py). None where the bound does not apply (a RankCache, TensorDIMM,
    host only)."""
    if cfg.mode != "recnmp" or cfg.rankcache_bytes or not results or "nmp" not in results[0]:
        return None
    host_total = nmp_total = 0.0
    worst = None
    for s, r in zip(streams, results, strict=True):
        d = map_lookups_fast(cfg, s)
        hb, nb = host_lower_bound(cfg, d), nmp_lower_bound(cfg, d, s.poolings, s.row_bytes, s.tables)
        host_total += r["host"].cycles
        nmp_total += nb.cycles
        if worst is None or nb.cycles > worst[1].cycles:
            worst = (hb, nb)
    return host_total / max(nmp_total, 1e-9), worst[0], worst[1]


def summarise(cfg: NmpConfig, results: list[dict[str, ModeResult]], looked_up_bytes: list[float],
              ranks_with_data: int | None = None, bound: tuple[float, Bound, Bound] | None = None) -> list[dict]:
    """Metric dicts over all batches: sums for bytes and counts, per-batch samples for latencies.
    ranks_with_data: ranks that hold table rows under the placement (dram.Placement.ranks_holding_data);
    bound: speedup_bounds' result, reported beside the speedup with the term that binds each mode."""
    ns_per_cycle = 1e3 / cfg.timings.clock_mhz
    out: list[dict] = []
    if ranks_with_data is not None:
        out.append(_metric("nmp.ranks_with_data", ranks_with_data, "ranks", f"ranks holding table rows under "
                           f"mapping {cfg.mapping} (of {cfg.geometry.total_ranks}; page colouring spreads a table's "
                           "4 KiB pages over several ranks when tables are fewer than ranks)"))
    for mode in ("host", "nmp"):
        rs = [r[mode] for r in results if mode in r]
        if not rs:
            continue
        tag = "host" if mode == "host" else cfg.mode
        lat = [r.cycles * ns_per_cycle for r in rs]
        accesses = sum(r.dram_accesses for r in rs)
        total_ns = sum(lat)
        out += [
            _metric(f"{tag}.batch_latency", float(np.mean(lat)), "ns", "emulated cycles from the first command to "
                    "the last data beat of a batch × tCK, mean over batches", lat),
            _metric(f"{tag}.channel_data_bytes", sum(r.channel_data_bytes for r in rs), "B",
                    "host: BL8 bursts × 64 B (every looked-up row); NMP: partial sums × vector bytes"),
            _metric(f"{tag}.channel_cmd_bytes", sum(r.channel_cmd_bytes for r in rs), "B",
                    f"host: DDR commands × {cfg.ca_bits_per_command} bits / 8; NMP: lookups × {cfg.inst_bits}-bit "
                    "instructions / 8"),
            _metric(f"{tag}.dram_internal_bytes", sum(r.dram_bytes for r in rs), "B",
                    "bursts read from the DRAM arrays × 64 B (RankCache hits excluded)"),
            _metric(f"{tag}.row_buffer_hit_rate", sum(r.row_hits for r in rs) / max(accesses, 1), "ratio",
                    "DRAM requests that found their row open / DRAM requests"),
            _metric(f"{tag}.effective_bandwidth", sum(looked_up_bytes[: len(rs)]) / max(total_ns, 1e-9), "GB/s",
                    "looked-up vector bytes (lookups × row bytes) / emulated batch time"),
            _metric(f"{tag}.energy", float(np.mean([energy_nj(cfg, r) / 1e3 for r in rs])), "uJ",
                    "per batch: ACT × 2.1 nJ + DRAM bits × 14 pJ + channel bits (data + C/A) × 22 pJ + RankCache "
                    "accesses × 50 pJ (REFERENCE.md)"),
        ]
        if mode == "nmp":
            probes = sum(r.cache_probes for r in rs)
            pl = np.concatenate([r.packet_latency for r in rs]) * ns_per_cycle
            out.append(_metric("nmp.rankcache_hit_rate", sum(r.cache_hits for r in rs) / probes if probes else 0.0,
                               "ratio", "RankCache hits / probes (lookups with the locality bit), LRU per rank"))
            if pl.size:
                m = _metric("nmp.packet_latency", float(pl.mean()), "ns", "first instruction sent to last partial "
                            "sum returned, per packet, mean", list(pl))
                out.append(m)
    if len(results) and "nmp" in results[0]:
        host = sum(r["host"].cycles for r in results)
        nmp = sum(r["nmp"].cycles for r in results)
        out.append(_metric("nmp.speedup_over_host", host / max(nmp, 1), "x", "host baseline batch cycles / NMP "
                           "batch cycles, same lookups and placement, summed over batches"))
        if bound is not None:
            value, hb, nb = bound
            m = _metric("nmp.speedup_bound", value, "x", f"emulated host cycles / NMP lower bound (bounds.py; "
                        f"NMP bound by the {nb.term}, host by the {hb.term}; "
                        f"C/A {cfg.inst_per_cycle:g} instructions/cycle, "
                        f"{cfg.geometry.ranks_per_channel} ranks/channel); no emulated run exceeds it")
            out.append(m | {"nmp_bound_by": nb.term, "host_bound_by": hb.term})  # for readers of the record
        eh = sum(energy_nj(cfg, r["host"]) for r in results)
        en = sum(energy_nj(cfg, r["nmp"]) for r in results)
        out.append(_metric("nmp.energy_saving", 1 - en / eh if eh else 0.0, "ratio", "1 − NMP energy / host energy"))
    return out


def run_nmp(cfg: NmpConfig, spec, batches) -> list[dict]:
    """Emulate `batches` (embedding.batch.Batch) of workload `spec` (embedding.spec.WorkloadSpec) under `cfg`."""
    if not cfg.enabled:
        return []
    table_rows = np.array([t.rows for t in spec.tables], dtype=np.int64)
    row_bytes = np.array([math.ceil(t.row_bytes) for t in spec.tables], dtype=np.int64)
    streams = [LookupStream.from_batch(b, table_rows, row_bytes) for b in batches]
    results = emulate_streams(cfg, streams)
    looked = [float(row_bytes[s.tables].sum()) for s in streams]
    held = placement(cfg, table_rows, row_bytes).ranks_holding_data(cfg.geometry.total_ranks)
    return summarise(cfg, results, looked, held, speedup_bounds(cfg, streams, results))
