"""`Setting`: one compression setting, framework-free; every frontend's compressor is one."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Optional

from horovod_q8 import formats
from horovod_q8.options import COMPRESSOR_OPTIONS, HOROVOD_OWN, check_compressor_options, refuse_options_of_horovod_own, shown


def check_compressor(comp: Any) -> None:
    """Check a compressor object: its `format` is a Format, its options as options.py checks them."""
    fmt = getattr(comp, "format", None)
    if not isinstance(fmt, formats.Format):
        raise ValueError(f"format must be a horovod_q8.formats.Format (see formats.get), "
                         f"got {shown(fmt)}")
    check_compressor_options(**{k: getattr(comp, k, v) for k, v in COMPRESSOR_OPTIONS.items()})


def by_name(name: str = "q8", *, block_size: Optional[int] = None, rounding: Optional[str] = None,
            seed: Optional[int] = None, threshold: Optional[float] = None, levels: Optional[dict] = None,
            min_size: int = 1024, error_feedback: Optional[bool] = None, warmup_steps: int = 0,
            schedule: str = "auto", pipeline_elements: int = 0) -> Optional[tuple]:
    """What each frontend's `compressor(name, ...)` builds: None for Horovod's own ("none",
    "fp16", which take no option: one given is refused), else (the format, the compressor's
    keyword options)."""
    options = dict(min_size=min_size, error_feedback=error_feedback, warmup_steps=warmup_steps, schedule=schedule,
                   pipeline_elements=pipeline_elements)
    format_options = dict(block_size=block_size, rounding=rounding, seed=seed, threshold=threshold, levels=levels)
    if name in HOROVOD_OWN:
        refuse_options_of_horovod_own(name, {**format_options, **options})
        return None
    return formats.get(name, **format_options), options


@dataclass(frozen=True)
class Setting:
    """A horovod_q8 compression setting; hashable and the same on every rank.

    format: the data type (`horovod_q8.formats.get`). min_size: tensors with fewer elements
    go uncompressed. error_feedback: keep what quantization dropped and add it next step
    (None: on for threshold formats). warmup_steps: first steps uncompressed.
    schedule: "auto", "two_phase" or "allgather". pipeline_elements: send a larger tensor as
    pieces of this many elements, so one piece's codec overlaps another's transfer (0: whole).
    """

    format: formats.Format
    min_size: int = 1024
    error_feedback: Optional[bool] = None
    warmup_steps: int = 0
    schedule: str = "auto"
    pipeline_elements: int = 0

    def __post_init__(self) -> None:
        check_compressor(self)

    @property
    def name(self) -> str:
        return self.format.name

    @property
    def feedback(self) -> bool:
        return self.format.uses_residual if self.error_feedback is None else self.error_feedback

    def fingerprint(self) -> dict:
        """Every field as plain JSON values: what ranks compare to agree on the setting;
        error_feedback as it takes effect (None and False are the same for q8; threshold
        formats keep their residual whatever it says: engine.Request.keeps_residual)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(Setting)}
        d["error_feedback"] = self.feedback or self.format.uses_residual
        d["format"] = {k: list(v) if isinstance(v, tuple) else v
                       for k, v in dataclasses.asdict(self.format).items()}
        return json.loads(json.dumps(d))


def difference(a: dict, b: dict, prefix: str = "") -> str:
    """The fields where two fingerprints differ, as "key=a here vs b there; ..."."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            sub = difference(va, vb, prefix + k + ".")
            if sub:
                out.append(sub)
        elif va != vb:
            out.append(f"{prefix}{k}={va!r} here vs {vb!r} there")
    return "; ".join(out)
