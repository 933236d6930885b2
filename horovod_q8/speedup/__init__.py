"""The predictive speedup model: alpha-beta costs of the collectives horovod_q8 and Horovod run,
per fused buffer, against compute time with a fixed overlap; presets for links and codecs."""
from horovod_q8.speedup.model import allreduce_time, break_even, predict, step

__all__ = ["allreduce_time", "break_even", "predict", "step"]
