"""An emulated cluster on one Linux machine: hosts as network namespaces, links shaped by tc."""
from horovod_q8.cluster.netns import Cluster, ClusterError, parse_rate, parse_time

__all__ = ["Cluster", "ClusterError", "parse_rate", "parse_time"]
