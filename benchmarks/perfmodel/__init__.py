"""The learned performance model's harness: what the machine is (`machine`), measured records (`collect`),
fitting and held-out evaluation (`train`), and the `dlrmbench perfmodel` command (`cli`). The predictor the
planner uses lives in `sharding.learned_cost` (imports flow benchmarks → sharding)."""
