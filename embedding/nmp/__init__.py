"""Near-memory lookup emulation: a DDR4 DRAM model and RecNMP-style rank-level pooling over embedding lookups."""
from embedding.nmp.config import DramGeometry, DramTimings, EnergyParams, NmpConfig, NmpConfigError
from embedding.nmp.execute import LookupStream, ModeResult, RankCache, emulate_batch
from embedding.nmp.run import emulate_streams, energy_nj, run_nmp, summarise

__all__ = ["DramGeometry", "DramTimings", "EnergyParams", "NmpConfig", "NmpConfigError", "LookupStream",
           "ModeResult", "RankCache", "emulate_batch", "emulate_streams", "energy_nj", "run_nmp", "summarise"]
