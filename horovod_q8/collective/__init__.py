"""The compressed allreduce without a framework: plans and local steps."""
from horovod_q8.collective.plan import ALLGATHER, TWO_PHASE, Plan, choose_schedule, make_plan

__all__ = ["ALLGATHER", "TWO_PHASE", "Plan", "choose_schedule", "make_plan"]
