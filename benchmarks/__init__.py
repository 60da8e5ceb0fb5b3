"""dlrmbench: benchmarks."""
