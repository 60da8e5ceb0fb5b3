"""Analytic lower bounds on a batch's cycles, host baseline and RecNMP, and the speedup bound they give.

Each term is a resource every schedule must use at least this long, so a batch cannot finish sooner than the
largest term of its busiest channel; which term that is names what the configuration is bound by:

- data bus (host): every burst crosses the channel data bus, tBL cycles each;
- C/A bus: host commands (one RD per burst, one ACT per distinct DRAM row) × cmd_cycles; NMP instructions
  × inst_bits / C/A bits per cycle (NmpConfig.inst_cost), one per lookup;
- rank data path (NMP, "rank count"): a rank's bursts cross its own data path, tBL each, so the busiest rank's
  bursts × tBL: with balanced ranks this is lookups × bursts × tBL / ranks, i.e. ranks × per-rank rate;
- bank timing: per rank, its ACTs (≥ distinct rows) spaced by tRRD_S and 4 per tFAW; per bank, tRC apart;
- psum return (NMP): one partial sum per (pooling, DIMM) crosses the channel data bus, tBL per burst.

Every term also counts the latency no schedule can hide at its ends: all banks start closed, so the first data
beat comes ≥ tRCD + tCL after the first command (after the first instruction's arrival, ≥ 1 cycle, for NMP); after
the last instruction arrives its row still has to be read (≥ tCL + b·tBL, b = the fewest bursts of a vector), the
DIMM adds (1 cycle) and a partial sum (≥ b bursts) returns; after a rank's last burst the add and that psum follow.

The speedup bound is emulated host cycles / the NMP lower bound: no emulated NMP run can beat it. RankCache hits
skip DRAM, so the bound assumes none (it is stated for configurations without a RankCache).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedding.nmp.config import NmpConfig
from embedding.nmp.dram import DecodedLookups

__all__ = ["Bound", "host_lower_bound", "nmp_lower_bound"]


@dataclass(frozen=True)
class Bound:
    """Lower bound on a batch's cycles: the busiest channel's largest term, and every term of that channel."""

    cycles: float
    term: str
    terms: dict[str, float]


def _per(keys: np.ndarray, size: int, weights: np.ndarray | None = None) -> np.ndarray:
    return np.bincount(keys, weights=weights, minlength=size).astype(np.float64)


def _bank_timing(cfg: NmpConfig, d: DecodedLookups) -> np.ndarray:
    """Per channel: the slowest rank's ACT bound, ACTs ≥ distinct (bank, row) per rank."""
    g, t = cfg.geometry, cfg.timings
    rpc, banks = g.ranks_per_channel, g.banks_per_rank
    glob_bank = (d.channel * rpc + d.rank) * banks + d.bank
    rows = np.unique(glob_bank * (int(d.row.max(initial=0)) + 1) + d.row)
    bank_of = rows // (int(d.row.max(initial=0)) + 1)
    acts_bank = _per(bank_of, g.total_ranks * banks)
    acts_rank = acts_bank.reshape(g.total_ranks, banks).sum(axis=1)
    rank_t = np.maximum(np.maximum(np.ceil(acts_rank / 4) - 1, 0) * t.tFAW, np.maximum(acts_rank - 1, 0) * t.tRRD_S)
    bank_t = (np.maximum(acts_bank - 1, 0) * t.tRC).reshape(g.total_ranks, banks).max(axis=1)
    return np.maximum(rank_t, bank_t).reshape(g.channels, rpc).max(axis=1)


def _pick(cfg: NmpConfig, terms: dict[str, np.ndarray]) -> Bound:
    per_channel = np.max(np.stack(list(terms.values())), axis=0)
    c = int(np.argmax(per_channel))
    named = {k: float(v[c]) for k, v in terms.items()}
    return Bound(float(per_channel[c]), max(named, key=named.get), named)


def host_lower_bound(cfg: NmpConfig, d: DecodedLookups) -> Bound:
    """Host baseline: data bus, C/A bus (commands) and bank timing, per channel."""
    g, t = cfg.geometry, cfg.timings
    bursts = _per(d.channel, g.channels, d.bursts)
    rpc, banks = g.ranks_per_channel, g.banks_per_rank
    span = int(d.row.max(initial=0)) + 1
    rows = np.unique(((d.channel * rpc + d.rank) * banks + d.bank) * span + d.row)
    acts = _per(rows // span // (rpc * banks), g.channels)
    head = t.tRCD + t.tCL
    tail = t.tCL + int(d.bursts.min(initial=1)) * t.tBL
    return _pick(cfg, {"data bus": head + bursts * t.tBL, "C/A bus": (bursts + acts) * cfg.cmd_cycles + tail,
                       "bank timing": _bank_timing(cfg, d) + tail})


def nmp_lower_bound(cfg: NmpConfig, d: DecodedLookups, poolings: np.ndarray, row_bytes: np.ndarray,
                    tables: np.ndarray) -> Bound:
    """RecNMP (rank-level pooling): C/A bus (instructions), rank data paths, bank timing, psum return."""
    g, t = cfg.geometry, cfg.timings
    num, den = cfg.inst_cost
    inst = _per(d.channel, g.channels) * num / den
    rank_bursts = _per(d.channel * g.ranks_per_channel + d.rank, g.total_ranks, d.bursts)
    rank_data = (rank_bursts * t.tBL).reshape(g.channels, g.ranks_per_channel).max(axis=1)
    dimm = d.rank // g.ranks_per_dimm
    span = int(poolings.max(initial=0)) + 1
    key = (d.channel * g.dimms_per_channel + dimm) * span + poolings
    first = np.unique(key, return_index=True)[1]
    psum = _per(d.channel[first], g.channels, -(-row_bytes[tables[first]] // 64)) * t.tBL
    b = int(d.bursts.min(initial=1)) * t.tBL
    head = 1 + t.tRCD + t.tCL  # first instruction arrives, its row opens, its data comes
    after = 1 + b  # the DIMM adds the partial sums and one returns
    return _pick(cfg, {"C/A bus": inst + t.tCL + b + after, "rank data path": head + rank_data + after,
                       "bank timing": 1 + _bank_timing(cfg, d) + t.tRCD + t.tCL + b + after,
                       "psum return": head + b + 1 + psum})
