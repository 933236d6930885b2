"""`Format`: one data type with its options, and the registry of named formats."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

import numpy as np

from horovod_q8.formats import codebooks

CODEBOOK, THRESHOLD = "codebook", "threshold"
ROUNDINGS = ("nearest", "stochastic")

# Default threshold levels. twobit: MXNet's single threshold. q4_threshold: 7 magnitude
# levels per group, halving from the top level; groups told apart by tensor rank.
TWOBIT_THRESHOLD = 0.5
Q4_TOP_LEVELS = {"conv": 0.02, "dense": 0.01, "other": 0.02}


def halving_levels(top: float, n: int = 7) -> tuple[float, ...]:
    """n increasing levels top * 2**-(n-1), ..., top / 2, top."""
    return tuple(float(np.float32(top * 2.0 ** (k - n + 1))) for k in range(n))


def layer_group(ndim: int) -> str:
    """The 4-bit paper's three threshold groups, by tensor rank."""
    return "conv" if ndim >= 3 else "dense" if ndim == 2 else "other"


@dataclass(frozen=True)
class Format:
    """A quantized data type. Hashable; identical on every rank or the job stops.

    block_size: elements per absmax scale (codebook formats); 0 = the whole tensor,
    as in Dettmers' paper. levels: the increasing positive magnitudes of a threshold
    format (a single one for twobit); level_groups: per-layer-group levels (q4_threshold).
    """

    name: str
    kind: str
    bits: int
    codebook: str = ""
    block_size: int = 1024
    rounding: str = "nearest"
    seed: int = 0
    levels: tuple = ()
    level_groups: tuple = field(default=(), compare=True)

    def __post_init__(self) -> None:
        if self.bits not in (2, 4, 8):
            raise ValueError(f"{self.name}: bits must be 2, 4 or 8, got {self.bits}")
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"{self.name}: rounding must be one of {ROUNDINGS}, got {self.rounding!r}")
        if self.block_size < 0:
            raise ValueError(f"{self.name}: block_size must be >= 0 (0 = whole tensor)")
        if self.kind == THRESHOLD and self.levels:
            lv = np.asarray(self.levels, dtype=np.float64)
            if len(lv) > 2 ** (self.bits - 1) - 1 or np.any(lv <= 0) or np.any(np.diff(lv) <= 0):
                raise ValueError(f"{self.name}: levels must be at most {2 ** (self.bits - 1) - 1} "
                                 f"increasing positive values, got {self.levels}")

    @property
    def has_scales(self) -> bool:
        return self.kind == CODEBOOK

    @property
    def uses_residual(self) -> bool:
        return self.kind == THRESHOLD

    def for_shape(self, shape: Sequence[int]) -> "Format":
        """The format to use for a tensor of this shape (picks a q4_threshold group)."""
        if not self.level_groups:
            return self
        groups = dict(self.level_groups)
        return replace(self, levels=groups[layer_group(len(shape))], level_groups=())

    def n_blocks(self, n: int) -> int:
        if not self.has_scales or n == 0:
            return 0
        b = self.block_size or n
        return -(-n // b)

    def block_for(self, n: int) -> int:
        """The block length actually used for n elements."""
        return (self.block_size or n) if self.has_scales else max(n, 1)

    def nbytes(self, n: int) -> int:
        """Size of the packed buffer for n elements: float32 scales, then packed codes."""
        return 4 * self.n_blocks(n) + -(-n * self.bits // 8)

    def decode_table(self) -> np.ndarray:
        """float32[2**bits]: the value of every code (before scaling)."""
        if self.kind == CODEBOOK:
            return codebooks.tables(self.codebook, self.bits).values
        if not self.levels:
            raise ValueError(f"{self.name}: no levels chosen; call for_shape(shape) first")
        half = 2 ** (self.bits - 1)
        table = np.zeros(2 ** self.bits, dtype=np.float32)
        lv = np.asarray(self.levels, dtype=np.float32)
        table[1: len(lv) + 1] = lv
        table[half + 1: half + len(lv) + 1] = -lv
        table[half] = np.nan  # "negative zero" marks a non-finite input
        return table


def _codebook(name: str, codebook: str, bits: int) -> Format:
    return Format(name=name, kind=CODEBOOK, bits=bits, codebook=codebook)


_REGISTRY: dict[str, Format] = {
    "q8": _codebook("q8", "dynamic_tree", 8),
    "q8_dynamic_tree": _codebook("q8_dynamic_tree", "dynamic_tree", 8),
    "q8_linear": _codebook("q8_linear", "linear", 8),
    "q8_mantissa": _codebook("q8_mantissa", "mantissa", 8),
    "q8_static_tree": _codebook("q8_static_tree", "static_tree", 8),
    "q4": _codebook("q4", "q4", 4),
    "twobit": Format(name="twobit", kind=THRESHOLD, bits=2, levels=(TWOBIT_THRESHOLD,)),
    "q4_threshold": Format(
        name="q4_threshold", kind=THRESHOLD, bits=4,
        level_groups=tuple((g, halving_levels(t)) for g, t in Q4_TOP_LEVELS.items())),
}


def names() -> list[str]:
    """Every format name that `get` accepts."""
    return list(_REGISTRY)


def get(name: str, *, block_size: Optional[int] = None, rounding: Optional[str] = None,
        seed: Optional[int] = None, threshold: Optional[float] = None,
        levels: Optional[dict] = None) -> Format:
    """The format called `name`, with options overriding its defaults.

    threshold: twobit's threshold, or q4_threshold's top level for every group.
    levels: q4_threshold's top level per group, e.g. {"conv": 0.05, "dense": 0.01}.
    """
    if isinstance(name, Format):
        return name
    try:
        fmt = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown format {name!r}; known formats: {', '.join(names())}") from None
    changes: dict = {}
    if block_size is not None:
        changes["block_size"] = int(block_size)
    if rounding is not None:
        changes["rounding"] = rounding
    if seed is not None:
        changes["seed"] = int(seed)
    if fmt.kind == CODEBOOK and (threshold is not None or levels is not None):
        raise ValueError(f"{name} is a codebook format: threshold/levels do not apply")
    if fmt.name == "twobit":
        if levels is not None:
            raise ValueError("twobit takes one `threshold`, not `levels`")
        if threshold is not None:
            changes["levels"] = (float(threshold),)
    if fmt.name == "q4_threshold" and (threshold is not None or levels is not None):
        tops = dict(Q4_TOP_LEVELS)
        if threshold is not None:
            tops = {g: float(threshold) for g in tops}
        unknown = set(levels or {}) - set(tops)
        if unknown:
            raise ValueError(f"q4_threshold groups are {sorted(tops)}, not {sorted(unknown)}")
        tops.update(levels or {})
        changes["level_groups"] = tuple((g, halving_levels(t)) for g, t in tops.items())
    return replace(fmt, **changes)
