"""`Format`: one data type with its options, and the registry of named formats."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

import numpy as np

from horovod_q8 import options
from horovod_q8.formats import codebooks

CODEBOOK, THRESHOLD = "codebook", "threshold"
ROUNDINGS = ("nearest", "stochastic")
SEED_MAX = 2 ** 32 - 1  # the kernels use 32 bits of the seed: larger ones would alias

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


def smallest_block(bits: int) -> int:
    """The smallest block size B whose cost bits/8 + 4/B bytes per element is below fp16's 2."""
    return 32 // (16 - bits) + 1  # bits/8 + 4/B < 2  <=>  (16 - bits) * B > 32


def _check_block_cost(fmt: "Format") -> None:
    b = fmt.block_size
    if b and b < smallest_block(fmt.bits):
        cost = fmt.bits / 8 + 4 / b
        raise ValueError(
            f"{fmt.name}: block_size {b} costs {fmt.bits / 8:g} + 4/{b} = {cost:.3g} bytes per "
            f"element (codes + float32 scales), no fewer than fp16's 2; use block_size >= "
            f"{smallest_block(fmt.bits)}, or 0 for one scale per tensor")


def _check_levels(label: str, levels, bits: int) -> None:
    """1 to 2**(bits-1)-1 finite, positive, strictly increasing levels, as float32 (the
    kernels' precision: a level that rounds to 0 or inf there would send nothing)."""
    most = 2 ** (bits - 1) - 1
    ok = (isinstance(levels, tuple) and 1 <= len(levels) <= most
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in levels))
    if ok:
        with np.errstate(over="ignore"):
            lv = np.asarray(levels, dtype=np.float32)
        ok = bool(np.all(np.isfinite(lv)) and np.all(lv > 0) and np.all(np.diff(lv) > 0))
    if not ok:
        raise ValueError(f"{label}: levels must be 1 to {most} finite, positive, increasing "
                         f"numbers (as float32), got {levels!r}")


def _check_kind_options(fmt: "Format") -> None:
    """What only one kind has: a known codebook (codebook), levels (threshold)."""
    if fmt.kind == CODEBOOK:
        if not isinstance(fmt.codebook, str) or fmt.codebook not in codebooks.VALUE_TABLES:
            raise ValueError(f"{fmt.name}: codebook must be one of {sorted(codebooks.VALUE_TABLES)}, "
                             f"got {fmt.codebook!r}")
        if fmt.levels or fmt.level_groups:
            raise ValueError(f"{fmt.name}: a codebook format has no levels")
        _check_block_cost(fmt)
        return
    if not fmt.levels and not fmt.level_groups:
        raise ValueError(f"{fmt.name}: a threshold format needs levels or level_groups")
    if fmt.levels:
        _check_levels(fmt.name, fmt.levels, fmt.bits)
    for item in fmt.level_groups:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise ValueError(f"{fmt.name}: level_groups must be (group name, levels) pairs, got {item!r}")
        _check_levels(f"{fmt.name} group {item[0]!r}", item[1], fmt.bits)


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
        if not options.is_int(self.bits) or self.bits not in (2, 4, 8):
            raise ValueError(f"{self.name}: bits must be 2, 4 or 8, got {self.bits!r}")
        options.require_choice(f"{self.name}: kind", self.kind, (CODEBOOK, THRESHOLD))
        options.require_choice(f"{self.name}: rounding", self.rounding, ROUNDINGS)
        options.require_int(f"{self.name}: block_size (0 = one scale per tensor)", self.block_size)
        options.require_int(f"{self.name}: seed", self.seed, 0, SEED_MAX)
        _check_kind_options(self)

    @property
    def has_scales(self) -> bool:
        return self.kind == CODEBOOK

    @property
    def uses_residual(self) -> bool:
        return self.kind == THRESHOLD

    def for_group(self, group: str) -> "Format":
        """The format for a tensor of this layer group ("conv", "dense", "other"): a
        q4_threshold picks that group's levels; every other format is itself."""
        if not self.level_groups:
            return self
        groups = dict(self.level_groups)
        if group not in groups:
            raise ValueError(f"{self.name}: layer groups are {sorted(groups)}, not {group!r}")
        return replace(self, levels=groups[group], level_groups=())

    def for_shape(self, shape: Sequence[int]) -> "Format":
        """The format for a real tensor of this shape: its layer group from its rank."""
        return self.for_group(layer_group(len(shape)))

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
    An option that does not apply to the format is refused, never ignored.
    """
    given = {k: v for k, v in dict(block_size=block_size, rounding=rounding, seed=seed,
                                   threshold=threshold, levels=levels).items() if v is not None}
    if isinstance(name, Format):
        if given:
            raise ValueError(f"options {sorted(given)} apply to a format name, not to a Format "
                             f"object ({name.name}); use dataclasses.replace on it instead")
        return name
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown format {name!r}; known formats: {', '.join(names())}")
    fmt = _REGISTRY[name]
    _check_applies(fmt, given)
    changes = {k: given[k] for k in ("block_size", "rounding", "seed") if k in given}
    if threshold is not None:
        threshold = options.require_positive(f"{name}: threshold", threshold)
    if fmt.name == "twobit" and threshold is not None:
        changes["levels"] = (threshold,)
    if fmt.name == "q4_threshold" and (threshold is not None or levels is not None):
        changes["level_groups"] = _q4_level_groups(threshold, levels)
    return replace(fmt, **changes)


def _check_applies(fmt: Format, given: dict) -> None:
    """Refuse the options that would silently do nothing for this format."""
    name = fmt.name
    if fmt.kind == CODEBOOK and ("threshold" in given or "levels" in given):
        raise ValueError(f"{name} is a codebook format: threshold/levels do not apply")
    unused = sorted(set(given) & {"block_size", "rounding", "seed"})
    if fmt.kind == THRESHOLD and unused:
        raise ValueError(f"{name} is a threshold format: {'/'.join(unused)} "
                         f"{'does' if len(unused) == 1 else 'do'} not apply "
                         f"(no scales, no rounding); use threshold or levels")
    if "seed" in given and given.get("rounding", fmt.rounding) != "stochastic":
        raise ValueError(f"{name}: seed applies to rounding='stochastic' only")
    if name == "twobit" and "levels" in given:
        raise ValueError("twobit takes one `threshold`, not `levels`")


def _q4_level_groups(threshold: Optional[float], levels: Optional[dict]) -> tuple:
    """q4_threshold's (group, halving levels) pairs from a common top level and per-group ones."""
    tops = {g: threshold for g in Q4_TOP_LEVELS} if threshold is not None else dict(Q4_TOP_LEVELS)
    if levels is not None and not isinstance(levels, dict):
        raise ValueError(f"q4_threshold: levels must be a dict of group -> top level, got {levels!r}")
    unknown = set(levels or {}) - set(tops)
    if unknown:
        raise ValueError(f"q4_threshold groups are {sorted(tops)}, not {sorted(map(str, unknown))}")
    for g, top in (levels or {}).items():
        tops[g] = options.require_positive(f"q4_threshold: levels[{g!r}]", top)
    with np.errstate(over="ignore"):  # a top level past float32's range: Format refuses it
        return tuple((g, halving_levels(t)) for g, t in tops.items())
