"""Option checks, run when a format or compressor is built (framework-free: no TensorFlow).

Every check names the option, the bad value and what is accepted, so a meaningless setting
stops at once instead of doing nothing or failing at the first trace.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Sequence

# The collectives' schedules (collective/plan.py runs them; docs/design.md): "auto" picks
# allgather for N <= 2 ranks, else two-phase.
SCHEDULES = ("auto", "two_phase", "allgather")
# The compressor options that `collective.setting.check_compressor` reads, with their defaults.
COMPRESSOR_OPTIONS = {"min_size": 1024, "error_feedback": None, "warmup_steps": 0,
                      "schedule": "auto", "pipeline_elements": 0}


def shown(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def is_int(value: Any) -> bool:
    """A Python int; bool is refused (True would silently mean 1), so is numpy's int64,
    which the cross-rank settings check cannot serialise."""
    return isinstance(value, int) and not isinstance(value, bool)


def require_int(name: str, value: Any, minimum: int = 0, maximum: Optional[int] = None) -> int:
    """`value` if it is an int in [minimum, maximum]; else a ValueError naming `name`."""
    top = "" if maximum is None else f" and <= {maximum}"
    if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an int >= {minimum}{top}, got {shown(value)}")
    return value


def require_positive(name: str, value: Any) -> float:
    """`value` as a float if it is a finite real number > 0 (not a bool, not a string)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {shown(value)}")
    return float(value)


def require_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """`value` if it is one of `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {shown(value)}")
    return value


def require_bool_or_none(name: str, value: Any, none_means: str) -> Optional[bool]:
    """`value` if it is True, False or None; a string such as "no" would be truthy."""
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{name} must be True, False or None ({none_means}), got {shown(value)}")
    return value


def check_compressor_options(min_size: Any = 1024, error_feedback: Any = None, warmup_steps: Any = 0,
                             schedule: Any = "auto", pipeline_elements: Any = 0) -> None:
    """Refuse compressor options that are not what they claim to be (ValueError)."""
    require_int("min_size", min_size)
    require_int("warmup_steps", warmup_steps)
    require_int("pipeline_elements", pipeline_elements)
    require_bool_or_none("error_feedback", error_feedback, "on for threshold formats only")
    require_choice("schedule", schedule, SCHEDULES)


# Why op=Adasum, Min, Max and Product are refused, in every frontend.
UNSUPPORTED_OP = ("horovod_q8 supports op=hvd.Average and op=hvd.Sum; Adasum, Min, Max and Product cannot be "
                  "computed from quantized codes")

# Why a non-global process_set is refused, in every frontend: the engine's collectives span every
# rank, so the set's ranks alone would wait for the others. The whole sentence (per-tensor calls)
# and the part an optimizer's list of refusals takes.
NON_GLOBAL_PROCESS_SET = ("horovod_q8 compression reduces over every rank: a non-global process_set is not "
                          "supported (use Horovod's own compression for that process set)")
NON_GLOBAL_PROCESS_SET_PART = ("a non-global process_set (horovod_q8 reduces over every rank; use the global "
                               "process set, or Horovod's own compression for a subset)")

# The format options of `formats.get`; None means the format's own default.
FORMAT_OPTIONS = ("block_size", "rounding", "seed", "threshold", "levels")
HOROVOD_OWN = ("none", "fp16")  # names that give Horovod's own compressors


def refuse_options_of_horovod_own(name: str, given: dict) -> None:
    """Horovod's own compressors take none of horovod_q8's options: one set to anything but its
    default is refused (ValueError), never silently dropped."""
    defaults = {**dict.fromkeys(FORMAT_OPTIONS), **COMPRESSOR_OPTIONS}
    set_ = [f"{k}={v!r}" for k, v in given.items() if type(v) is not type(defaults[k]) or v != defaults[k]]
    if set_:
        raise ValueError(f"compressor({name!r}) is Horovod's own {name} compressor and takes none of horovod_q8's "
                         f"options, got {', '.join(set_)}: drop them, or name a horovod_q8 format (q8, q4, ...)")
