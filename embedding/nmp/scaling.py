"""Rank-count × C/A-width scaling of RecNMP, checked against its own analytic bound (bounds.py).

For one batch and each (ranks per channel R, C/A width w instructions per cycle) the emulated speedup S is set
beside two bounds on the NMP side (host cycles are the emulated host baseline's):

- rank side: host / max(busiest rank's data path, bank timing, psum return): the "ranks × per-rank rate" limit;
- C/A side: host / (instructions per channel / w): the command bus limit.

The speedup bound is their min (no run may exceed it). The prediction scales each by its measured efficiency:
η_rank(R), the ranks' efficiency at R with an effectively unlimited C/A bus (16 instructions per cycle; what is
lost there is the ranks' own: per-packet load imbalance, row misses, pipeline fill), and η_ca, the C/A bus's
efficiency where it alone binds (the largest R at half an instruction per cycle):
predicted = min(η_rank(R) × rank bound, η_ca × C/A bound). A single η (the 1-rank one) is reported beside it to
show how far the ranks' efficiency drifts with R.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from embedding.nmp.bounds import nmp_lower_bound
from embedding.nmp.config import NMP_INST_BITS, DramGeometry, NmpConfig
from embedding.nmp.execute import LookupStream, emulate_batch
from embedding.nmp.fast import map_lookups_fast

__all__ = ["ScalingPoint", "geometry_for", "scaling_sweep", "UNLIMITED_CA"]

UNLIMITED_CA = 16  # instructions per cycle taken as "C/A bus never binds" when measuring η_rank


@dataclass(frozen=True)
class ScalingPoint:
    ranks: int
    ca_per_cycle: int
    speedup: float
    bound: float
    term: str  # the NMP lower bound's binding term (bounds.nmp_lower_bound)
    rank_bound: float
    ca_bound: float
    eta_rank: float
    predicted: float

    @property
    def ratio(self) -> float:
        return self.speedup / self.predicted


def geometry_for(ranks: int, base: DramGeometry | None = None) -> DramGeometry:
    """`ranks` ranks per channel: 2 ranks per DIMM (1 for a single rank), DIMMs for the rest."""
    base = base or DramGeometry()
    return dataclasses.replace(base, dimms_per_channel=max(1, ranks // 2), ranks_per_dimm=min(ranks, 2),
                               capacity_gib=0.0)


def _measure(cfg: NmpConfig, stream: LookupStream) -> tuple[float, float, float, str]:
    """(speedup, rank-side bound, C/A bound, binding term) of one configuration."""
    res = emulate_batch(cfg, stream)
    host, nmp = res["host"].cycles, res["nmp"].cycles
    b = nmp_lower_bound(cfg, map_lookups_fast(cfg, stream), stream.poolings, stream.row_bytes, stream.tables)
    rank_side = max(v for k, v in b.terms.items() if k != "C/A bus")
    return host / nmp, host / rank_side, host / b.terms["C/A bus"], b.term


def scaling_sweep(stream: LookupStream, ranks: tuple[int, ...] = (1, 2, 4, 8, 16, 32),
                  widths: tuple[int, ...] = (1, 2, 4), base: NmpConfig | None = None
                  ) -> tuple[list[ScalingPoint], float, float]:
    """Points of the sweep, η_ca and the 1-rank η. base: the configuration varied (default RecNMP-base, fast
    fidelity); its C/A width is set to w × inst_bits bits per cycle, whole instructions."""
    base = base or NmpConfig(fidelity="fast")
    inst = base.inst_bits or NMP_INST_BITS

    def cfg(r: int, w: float) -> NmpConfig:
        bits = w * inst if w >= 1 else -(-inst // round(1 / w))
        return dataclasses.replace(base, geometry=geometry_for(r, base.geometry), ca_bits_per_cycle=bits,
                                   ca_packing="whole")

    s, _, ca_b, _ = _measure(cfg(max(ranks), 0.5), stream)
    eta_ca = s / ca_b
    eta = {}
    for r in ranks:
        s, rank_b, _, _ = _measure(cfg(r, UNLIMITED_CA), stream)
        eta[r] = s / rank_b
    points = []
    for r in ranks:
        for w in widths:
            s, rank_b, ca_b, term = _measure(cfg(r, w), stream)
            points.append(ScalingPoint(r, w, s, min(rank_b, ca_b), term, rank_b, ca_b, eta[r],
                                       min(eta[r] * rank_b, eta_ca * ca_b)))
    return points, eta_ca, eta[min(ranks)]
