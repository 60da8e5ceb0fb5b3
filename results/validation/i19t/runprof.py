import sys
from benchmarks.distributed.launch import launch_module
sys.exit(launch_module("stageprof", sys.argv[1:], 2, 300))
