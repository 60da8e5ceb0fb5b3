"""Where tables go: topology, plans, cost model, lower bounds, baselines, our optimizer, the TorchRec adapter."""
from sharding.baselines import BASELINES, greedy_plan, random_plan, round_robin_plan
from sharding.bounds import LowerBound, lower_bound
from sharding.cost import CostModel, RankCost, ShardCost, zipf_miss_rate
from sharding.optimizer import OptimizeStats, optimize
from sharding.plan import Shard, ShardingPlan, ShardingType, TablePlan
from sharding.topology import Link, MemoryTier, Topology, TopologyError, hardware_presets, load_topology
from sharding.validate import validate_plan
from sharding.workload import PlanError, PlanWorkload

__all__ = ["BASELINES", "greedy_plan", "random_plan", "round_robin_plan", "LowerBound", "lower_bound",
           "CostModel", "RankCost", "ShardCost", "zipf_miss_rate", "OptimizeStats", "optimize", "Shard",
           "ShardingPlan", "ShardingType", "TablePlan", "Link", "MemoryTier", "Topology", "TopologyError",
           "hardware_presets", "load_topology", "validate_plan", "PlanError", "PlanWorkload"]
