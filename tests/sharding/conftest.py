"""Small random tables and topologies for the sharding tests."""
from __future__ import annotations

from hypothesis import strategies as st

from embedding.spec import AccessSpec, PoolingSpec, TableSpec
from sharding.topology import Link, MemoryTier, Topology


@st.composite
def tables(draw, min_count: int = 1, max_count: int = 24) -> tuple[TableSpec, ...]:
    n = draw(st.integers(min_count, max_count))
    out = []
    for i in range(n):
        rows = draw(st.integers(3, 2_000_000))
        dim = draw(st.sampled_from([4, 8, 16, 32, 64, 128, 256]))
        pool = draw(st.sampled_from([1.0, 2.0, 5.0, 20.0, 80.0]))
        alpha = draw(st.sampled_from([0.0, 0.9, 1.05, 1.2]))
        out.append(TableSpec(f"t{i}", rows, dim, "fp32", PoolingSpec("fixed", pool),
                             AccessSpec("zipf", alpha) if alpha else AccessSpec("uniform")))
    return tuple(out)


def topology(hosts: int, per_host: int, hbm_gb: float, ddr_gb: float = 64.0) -> Topology:
    return Topology("test", "cuda", hosts, per_host,
                    (MemoryTier("hbm", hbm_gb * 1e9, 1.5e12), MemoryTier("ddr", ddr_gb * 1e9, 16e9)),
                    Link(300e9, 10e-6), Link(40e9, 20e-6))


@st.composite
def topologies(draw) -> Topology:
    return topology(draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4])),
                    draw(st.sampled_from([0.5, 2.0, 16.0])))
