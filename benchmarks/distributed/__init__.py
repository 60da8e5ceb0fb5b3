"""Distributed execution of sharding plans: TorchRec `DistributedModelParallel` across real ranks.

  launch.main      `dlrmbench dist`: local ranks via torch's elastic agent (torchrun's machinery)
  worker.main      one rank (`python -m benchmarks.distributed.worker`, torchrun-compatible)
  stages           per-stage timing of the sharded collection and bytes per collective
  verify           sharded vs unsharded forward per feature and one training step
"""
