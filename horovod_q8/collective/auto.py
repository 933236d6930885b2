"""`Auto`: each bucket's format chosen from the measured link and codec through the cost model.

At first use every rank measures, with the collectives its frontend really runs, the link's
per-message cost (alpha) and bandwidth, and this machine's codec rates for every allowed
format (`measure`); the ranks exchange their figures and all take the slowest (`combine`), so
every rank holds the very same `Calibration`. `AutoPlan.choose(n)` then predicts one
allreduce of n float32 values for each allowed format with `collective.cost.allreduce_time`
(the speedup model's core) and takes the fastest: identical inputs, identical code, identical
choice on every rank. Choices depend only on the size, so a tensor keeps its format (and its
error-feedback state) for the whole run; a checkpoint keeps the calibration, so a resumed run
chooses the same. `HOROVOD_Q8_AUTO=<format>` forces one choice for every bucket.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import statistics
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from horovod_q8 import backends, codec, formats
from horovod_q8.collective import cost
from horovod_q8.formats import COMPRESSION_NAMES
from horovod_q8.options import require_int, shown

OVERRIDE_ENV = "HOROVOD_Q8_AUTO"
CODEBOOK_OPTIONS = ("block_size", "rounding", "seed")
THRESHOLD_OPTIONS = ("threshold", "levels")
SETTING_OPTIONS = ("error_feedback", "warmup_steps", "schedule", "pipeline_elements")
DEFAULT_ALLOW = ("none", "fp16", "q8")
# Elements of the two probe sizes. LARGE is a 16 MiB float32 tensor: a CPU-bound link moves a
# 4 MiB message, which stays in cache, about twice as fast as a 100 MB one.
SMALL, LARGE = 4096, 1 << 22
# Horovod's own paths are also timed at HUGE (a 64 MiB float32 message) where the link
# moves LARGE within HUGE_BELOW_S: fp16's MPI sum of halves slows down past a few MB (2 hosts,
# Numba: fitted at LARGE, fp16 was predicted at half its 25.6M-element time and chosen over q8).
HUGE, HUGE_BELOW_S = 1 << 24, 0.06
# A HUGE timing under HUGE_AGAIN_BELOW_S on every rank is taken twice more and the median
# counts: one timing of none's 16M elements took 3.5 to 6.2 ns per element on 2 unshaped hosts
# across four runs, where the lone 25.6M-element tensor measured 4.1-4.8, and extrapolated to
# it, the low ones kept float32 where q8 was 28% faster (docs/runs/auto/2026-12-05-88a01db).
HUGE_AGAIN_BELOW_S = 0.15
# Where the frontend fuses (Horovod's TensorFlow reducer), Horovod's own paths are timed at HUGE as
# one grouped allreduce of this many tensors, as Horovod fuses a step's tensors: copied into its
# fusion buffer and out, where a lone tensor goes to MPI as it is. Timed alone, with a copy of the
# message added at the measured copy rate, none's 64 MiB put ResNet-50's step 10-19% under what it
# took in 3 of 4 logs of emulated hosts, and 29-52% over it on 2 loopback ranks, where Gloo moved
# the fused step faster than the lone tensor (129-142 ms against 163-188,
# docs/runs/auto/2026-12-06-fdbd841).
FUSED_PARTS = 4
# Horovod's fusion threshold in bytes, 128 MiB unless set (Horovod >= 0.21, horovod/common/operations.cc)
FUSION_ENV, DEFAULT_FUSION_THRESHOLD = "HOROVOD_FUSION_THRESHOLD", 128 << 20
_LEADING_INTEGER = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", re.ASCII)  # strtol's own whitespace and digits
PATTERN = 1 << 16  # probe values: a random normal block this long, repeated
CODEC_ELEMENTS = 1 << 21  # elements each codec rate is measured on: enough that threads' start-up does not count
# calls in one codec timing, back to back after the ranks' barrier: ranks that share cores do not
# leave it at the same instant, and a single short call of one rank can run while the other's has
# ended (2 loopback ranks, Numba, 2 threads each, single calls: q8's encode measured at 1.31 G
# elements/s in one calibration, 0.42-0.43 in the two before, and Auto sent ResNet-50 as q8, 8.7%
# behind float32, docs/runs/auto/2026-12-06-b276418)
PROBE_BATCH = 3
# timed calls of each path's SMALL allreduce: a few ms each, and on shared cores one in two or
# three is slowed by the other rank (2 loopback ranks: q8's 6.2 ms in one calibration, 14.8 in
# the next, best of 2 each, docs/runs/auto/2026-12-05-867c21c/loopback_avx2.log)
SMALL_REPEATS = 5
# On a fast link the LARGE allgather is timed this many more times, the least counting (a few ms
# each): the best of two read 5.06 Gbit/s on 2 loopback ranks where other calibrations read 7.5-14.7,
# and Auto kept ResNet-50 as float32, 40% behind q8 (docs/runs/auto/2026-12-06-7655ec7/loopback_avx2.log)
GATHER_AGAIN = 4
MARGIN = 0.05  # a format other than none must be predicted this much faster to be chosen
UNIFORM = f"one format for the step's buckets: mixing not predicted {MARGIN:.0%} faster"
RANGE_TOP = 1 << 30  # the largest bucket `AutoPlan.classes` describes


def check_allow(allow: Sequence[str]) -> Tuple[str, ...]:
    """The allowed formats as a tuple in the order given; unknown or repeated names refused."""
    if isinstance(allow, str) or not allow:
        raise ValueError(f"allow must be a non-empty list of format names, got {shown(allow)}")
    out = tuple(allow)
    unknown = [a for a in out if a not in COMPRESSION_NAMES]
    if unknown:
        raise ValueError(f"allow: unknown format(s) {unknown}; choose from {', '.join(COMPRESSION_NAMES)}")
    if len(set(out)) != len(out):
        raise ValueError(f"allow names a format twice: {list(out)}")
    return out


@dataclass(frozen=True)
class Auto:
    """The Auto setting: which formats it may choose, tensors below `min_size` always plain,
    and the options of the quantized formats it may choose (block_size, schedule, ...)."""

    allow: Tuple[str, ...] = DEFAULT_ALLOW
    min_size: int = 1024
    options: Tuple[Tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow", check_allow(self.allow))
        require_int("min_size", self.min_size)
        # hashable: a dict value (q4_threshold's levels) as its sorted items
        object.__setattr__(self, "options", tuple(sorted(
            (k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in dict(self.options).items())))

    def options_for(self, name: str) -> dict:
        """The options that apply to format `name`: the setting's, and its kind's (a codebook
        format's block_size, rounding, seed; a threshold format's threshold, levels)."""
        kind = formats.get(name).kind
        keep = SETTING_OPTIONS + (CODEBOOK_OPTIONS if kind == formats.CODEBOOK else THRESHOLD_OPTIONS)
        return {k: dict(v) if k == "levels" else v for k, v in self.options if k in keep}

    @property
    def name(self) -> str:
        return "auto"

    @property
    def warmup_steps(self) -> int:
        """The first steps its quantized formats send uncompressed (as a fixed setting's)."""
        return int(dict(self.options).get("warmup_steps", 0))

    def fingerprint(self) -> dict:
        """Plain JSON values: what ranks compare to agree on the setting. error_feedback=False
        does what leaving it out does for every format (codebooks: off; threshold formats keep
        their residual), so it is left out."""
        return {"auto": {"allow": list(self.allow), "min_size": self.min_size,
                         "options": {k: v for k, v in self.options if (k, v) != ("error_feedback", False)},
                         "override": os.environ.get(OVERRIDE_ENV, "").strip() or None}}  # as set: ranks compare it first


class AutoSettingError(ValueError):
    """An Auto setting that cannot work, said in one sentence."""

    ag_pass_through = True  # TensorFlow's autograph raises it as itself from inside tf.function


def override(allow: Optional[Sequence[str]] = None) -> Optional[str]:
    """HOROVOD_Q8_AUTO's format, checked (against `allow` where given); None when unset."""
    value = os.environ.get(OVERRIDE_ENV, "").strip()
    if not value:
        return None
    if value not in COMPRESSION_NAMES:
        raise AutoSettingError(f"{OVERRIDE_ENV}={value!r} is not a format; choose from {', '.join(COMPRESSION_NAMES)}")
    if allow is not None and value not in allow:
        raise AutoSettingError(f"{OVERRIDE_ENV}={value!r} is not among this Auto's allow={list(allow)}")
    return value


@dataclass(frozen=True)
class Calibration:
    """What the choice rests on, the same on every rank. alpha: seconds per message;
    bandwidth: bytes/s a ring allreduce reaches per link; gather_bandwidth: what the allgather
    that carries codes reaches; rates: format -> (encode, decode, sum) on this machine: elements
    encoded and decoded per second, and elements of every part per second of the ranks' sum of
    `ranks` parts in one pass (a decode's rate where a saved calibration has none); small,
    large: format -> seconds of one real allreduce of SMALL and LARGE elements sent so (what the
    path really costs, fixed costs and Horovod's own work included)."""

    ranks: int
    alpha: float
    bandwidth: float
    gather_bandwidth: float
    rates: Tuple[Tuple[str, float, float, float], ...] = ()
    small: Tuple[Tuple[str, float], ...] = ()
    large: Tuple[Tuple[str, float], ...] = ()
    huge: Tuple[Tuple[str, float], ...] = ()
    seconds: float = field(default=0.0, compare=False)  # what measuring cost on this rank

    def __post_init__(self) -> None:
        object.__setattr__(self, "rates", tuple((str(r[0]), float(r[1]), float(r[2]), float(r[min(len(r) - 1, 3)]))
                                                for r in self.rates))

    def rate(self, name: str) -> Tuple[float, float, float]:
        """(encode, decode, sum) rates of format `name` (see the class)."""
        if name == "none":
            return math.inf, math.inf, math.inf
        for n, enc, dec, sm in self.rates:
            if n == name:
                return enc, dec, sm
        raise KeyError(f"horovod_q8 Auto: no codec rate was measured for {name!r}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rates"] = [list(r) for r in self.rates]
        d["small"] = [list(r) for r in self.small]
        d["large"] = [list(r) for r in self.large]
        d["huge"] = [list(r) for r in self.huge]
        return d

    @staticmethod
    def from_dict(d: dict) -> "Calibration":
        try:
            return Calibration(int(d["ranks"]), float(d["alpha"]), float(d["bandwidth"]),
                               float(d["gather_bandwidth"]),
                               tuple(tuple(r) for r in d["rates"]),
                               tuple((str(n), float(t)) for n, t in d["small"]),
                               tuple((str(n), float(t)) for n, t in d["large"]),
                               tuple((str(n), float(t)) for n, t in d.get("huge", ())),
                               seconds=float(d.get("seconds", 0.0)))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise AutoSettingError(f"horovod_q8 Auto: not a saved calibration ({e!r})") from None

    def digest(self) -> str:
        body = {k: v for k, v in self.to_dict().items() if k != "seconds"}
        return hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Probe:
    """A frontend's collectives, each blocking until done on this rank (the callers time them).

    send(name, n): one allreduce of n float32 elements sent as `name` ("none", "fp16" or a
    format) through the very path that frontend uses for a bucket so chosen, averaged where
    Horovod's optimizers and `hvd.allreduce` average by default: Horovod scales the sum in one
    more pass over it (2 loopback ranks, 25.6M elements: 73 ms averaged, 66 summed; ResNet-50's
    8 buckets grouped 89 and 84; a scratch script, no log).
    allgather(nbytes): every rank's nbytes uint8 to every rank, as the compressed path sends codes.
    gather(obj): every rank's obj, in rank order (an allgather_object).
    fp16_roundtrip(n): the frontend's float32 -> float16 -> float32 casts of n elements.
    send_fused(name, n): where the frontend leaves a step's none and fp16 tensors to Horovod's
    fusion, one grouped allreduce of n elements in FUSED_PARTS tensors sent as `name`; None
    where buckets go alone (horovod.torch's per-tensor choices, DDP's buckets).
    traced: the frontend runs its compressed path traced (TensorFlow's steps and tf.function
    calls). A quantized path's fixed cost is then that of its two collectives, Horovod's
    allreduce of the control tensor and the allgather of the codes, each timed at SMALL, not
    that of an eager call, whose ~34 ops' dispatch a traced step does not pay (2 unshaped hosts,
    AVX2: q8 at 4,096 elements 4.6 ms eager, 1.8 traced, the two collectives 2.0).
    """

    ranks: int
    send: Callable[[str, int], None]
    allgather: Callable[[int], None]
    gather: Callable[[object], List[object]]
    fp16_roundtrip: Optional[Callable[[int], None]] = None
    xp: object = np  # where the codec runs: NumPy (CPU kernels) or CuPy (GPU tensors)
    sync: Callable[[], None] = lambda: None  # waits for the device (CuPy's kernels are asynchronous)
    traced: bool = False
    send_fused: Optional[Callable[[str, int], None]] = None


def probe_values(n: int) -> np.ndarray:
    """n float32 random normal values (the codec's time depends on them), the same on every rank:
    one block repeated, since drawing 16M normals would cost the probe 0.25 s by itself."""
    block = np.random.default_rng(PATTERN).standard_normal(PATTERN).astype(np.float32)
    return np.resize(block, n)


def fusion_threshold() -> int:
    """Horovod's fusion threshold in bytes, read as Horovod reads HOROVOD_FUSION_THRESHOLD
    (strtol: its leading integer, 0 where there is none), so that "64MB" is 64 bytes there and
    here; such a value is warned about, since Horovod then fuses almost nothing."""
    text = os.environ.get(FUSION_ENV)
    if text is None:
        return DEFAULT_FUSION_THRESHOLD
    match = _LEADING_INTEGER.match(text)
    threshold = int(match.group(1)) if match else 0
    if not match or match.end() != len(text.rstrip()):
        warnings.warn(f"{FUSION_ENV}={text!r}: Horovod reads {threshold} bytes from it (a number of bytes is "
                      f"meant, e.g. {FUSION_ENV}={64 << 20} for 64 MiB)", stacklevel=2)
    return max(threshold, 0)


def fusion_elements(name: str) -> int:
    """Elements Horovod fuses into one message when sent as `name` (none or fp16): its fusion
    threshold over the bytes per element sent."""
    return fusion_threshold() // (2 if name == "fp16" else 4)


def _best(fn: Callable[[], None], repeats: int, warm: bool = True,
          before: Callable[[], None] = lambda: None) -> float:
    """The least time of `repeats` calls of fn; `before` runs ahead of each, untimed."""
    if warm:
        fn()  # the first call pays for buffers and connections
    best = math.inf
    for _ in range(repeats):
        before()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def codec_rates(names: Sequence[str], fp16_roundtrip: Optional[Callable[[int], None]] = None,
                n: int = CODEC_ELEMENTS, xp=np, sync: Callable[[], None] = lambda: None,
                together: Callable[[], None] = lambda: None, warm: bool = True,
                parts: int = 2) -> List[Tuple[str, float, float, float]]:
    """(name, encode, decode, sum) of each quantized format (and fp16) on this machine: elements/s
    encoded and decoded, and elements of every part per second of the ranks' sum of `parts`
    parts (one pass where the backend fuses it: 2 Numba parts of 25.6M q8 codes in 16.8 ms,
    two decodes 23.6, docs/runs/codec/2026-12-06-b822691); with arrays of `xp` (CuPy: the GPU
    kernels, `sync` waiting for them); `together` (a barrier) ahead of each probe's one timing,
    of PROBE_BATCH calls, so that ranks sharing cores run their codecs at once; warm: a warm-up
    call ahead of it."""
    x = xp.asarray(probe_values(n))

    def timed(fn: Callable[[], object]) -> float:
        if warm:
            fn()
            sync()
        return _best(lambda: ([fn() for _ in range(PROBE_BATCH)], sync()), repeats=1, warm=False,
                     before=together) / PROBE_BATCH

    out = []
    for name in names:
        if name == "none":
            continue
        if name == "fp16":
            t = timed(lambda: x.astype(np.float16).astype(np.float32)) if fp16_roundtrip is None \
                else timed(lambda: fp16_roundtrip(n))
            out.append((name, 2 * n / t, 2 * n / t, 2 * n / t))  # the roundtrip is one cast each way
            continue
        buf = codec.quantize(x, name, seed=1)
        dst = xp.empty_like(x)
        enc = timed(lambda: codec.quantize(x, name, seed=1))
        dec = timed(lambda: codec.dequantize(buf, name, n, out=dst))
        k = max(parts, 2)
        fmt = formats.get(name).for_shape((n,))
        summed = timed(lambda: backends.for_array(buf).decode_sum([buf] * k, fmt, n, dst, 1.0 / k))
        out.append((name, n / enc, n / dec, k * n / summed))
    return out


def measure(probe: Probe, allow: Sequence[str]) -> dict:
    """This rank's figures: the link's probe times, each allowed path's time at SMALL elements
    and the codec rates (a few hundred ms in all)."""
    t0 = time.perf_counter()
    # each timed codec call on every rank at once, as in a step: ranks that share cores share
    # them here too (2 loopback ranks, Numba: a lone q8 tensor took 183 ms where rates timed
    # at will predicted 98, docs/runs/auto/2026-12-05-9f0d90d/loopback_numba.log)
    def together() -> None:
        probe.gather(None)

    def codec(warm: bool) -> List[Tuple[str, float, float, float]]:
        return codec_rates(allow, probe.fp16_roundtrip, xp=probe.xp, sync=probe.sync, together=together, warm=warm,
                           parts=probe.ranks)

    rates = codec(warm=True)  # first: loads the kernels
    paths = dict.fromkeys(("none", *allow))
    timed = [name for name in paths if not probe.traced or name in cost.UNCOMPRESSED]
    small = {name: _best(lambda: probe.send(name, SMALL), repeats=SMALL_REPEATS) for name in timed}
    # Horovod's own paths at LARGE too (fp16's sum of halves on a CPU is not in the model); the
    # quantized paths' per-element cost is the model's: timed eagerly at LARGE too, their lines
    # swung from 0.54 to 1.82 times the model between two calibrations and 11 of 16 rows of
    # `bench auto` met its targets, against 15 (docs/runs/auto/2026-12-05-d18a26b)
    own = [name for name in paths if name in cost.UNCOMPRESSED]
    large = {name: _best(lambda: probe.send(name, LARGE), repeats=1) for name in own}
    # the allgather at two sizes, as the ring: its slope is the rate (one point would count the
    # eager call's fixed cost as wire: 3.4 Gbit/s where the ring moved 5.6 on 2 hosts at 10 Gbit/s)
    gathered_small = _best(lambda: probe.allgather(SMALL), repeats=SMALL_REPEATS)
    small.update({name: small["none"] + gathered_small for name in paths if name not in small})
    gathered = _best(lambda: probe.allgather(LARGE), repeats=1)
    huge = {}
    if max(probe.gather(large["none"])) < HUGE_BELOW_S:  # every rank decides alike
        # a fast link: LARGE once more (cheap here, and noisier: a slow spell is a larger share)
        large = {name: min(t, _best(lambda: probe.send(name, LARGE), repeats=1, warm=False))
                 for name, t in large.items()}
        gathered = min(gathered, _best(lambda: probe.allgather(LARGE), repeats=GATHER_AGAIN, warm=False))
        # the first 64 MiB allreduce pays for Horovod's and the transport's buffers (2.3x here)
        send_huge = probe.send_fused or probe.send
        for i, name in enumerate(own):
            huge[name] = _best(lambda: send_huge(name, HUGE), repeats=1, warm=i == 0)
            if max(probe.gather(huge[name])) < HUGE_AGAIN_BELOW_S:  # every rank decides alike
                more = [_best(lambda: send_huge(name, HUGE), repeats=1, warm=False) for _ in range(2)]
                huge[name] = statistics.median([huge[name], *more])
    # the codec, the cheap figure, once more at the end, the faster pass counting: a calibration
    # in a slow spell of this VM measured q8's encode at 1.03 G elements/s where the run before
    # measured 1.81, and sent ResNet-50 as fp16, 8.7% slower than q8 (2 unshaped hosts, AVX2,
    # docs/runs/auto/2026-12-05-75334f4)
    again = codec(warm=False)
    rates = [(r[0], *(max(a, b) for a, b in zip(r[1:], r2[1:]))) for r, r2 in zip(rates, again)]
    return {"small": small, "large": large, "huge": huge, "gather_small": gathered_small, "gather": gathered,
            "rates": rates, "seconds": time.perf_counter() - t0}


def combine(figures: Sequence[dict], ranks: int) -> Calibration:
    """Every rank's figures -> one Calibration: the slowest rank's figure of each kind (the
    collective waits for it). Pure, so ranks with the same list compute the same bits."""
    p = max(ranks, 2)
    small = {nm: max(f["small"][nm] for f in figures) for nm in figures[0]["small"]}
    large_of = {nm: max(f["large"][nm] for f in figures) for nm in figures[0]["large"]}
    huge_of = {nm: max(f.get("huge", {})[nm] for f in figures) for nm in figures[0].get("huge", {})}
    large = large_of["none"]
    gathered_small, gathered = max(f["gather_small"] for f in figures), max(f["gather"] for f in figures)
    # ring: t(n) = 2 (P-1) alpha + 2 (P-1) / P * 4 n / bandwidth, through the two sizes
    per_element = max(large - small["none"], 1e-12) / (LARGE - SMALL)
    bandwidth = 2 * (p - 1) / p * 4 / per_element
    alpha = max(small["none"] - per_element * SMALL, 0.0) / (2 * (p - 1))
    gather_time = gathered - gathered_small
    gather_bandwidth = (p - 1) * (LARGE - SMALL) / gather_time if gather_time > 0 else bandwidth
    names = [r[0] for r in figures[0]["rates"]]
    rates = tuple((nm, *(min(dict((r[0], r[i]) for r in f["rates"])[nm] for f in figures) for i in (1, 2, 3)))
                  for nm in names)
    return Calibration(ranks, alpha, bandwidth, gather_bandwidth, rates, tuple(small.items()),
                       tuple(large_of.items()), tuple(huge_of.items()), max(f["seconds"] for f in figures))


def calibrate(probe: Probe, allow: Sequence[str]) -> Calibration:
    """Measure here, exchange with every rank, combine: the same Calibration on every rank."""
    mine = measure(probe, allow)
    return combine(probe.gather(mine), probe.ranks)


@dataclass(frozen=True)
class Choice:
    """The format for a bucket of n elements and what each allowed format was predicted to take."""

    n: int
    name: str
    predicted: Tuple[Tuple[str, float], ...]
    reason: str


class AutoPlan:
    """Choices by bucket size from one Calibration: deterministic and fixed once made."""

    def __init__(self, auto: Auto, calibration: Calibration, restored: bool = False) -> None:
        self.auto = auto
        self.calibration = calibration
        self.restored = restored  # from a checkpoint, not measured by this run
        self.forced = override(auto.allow)
        self._cache: Dict[Tuple[int, int], Choice] = {}
        self._fit: Dict[str, Tuple[float, float]] = {}

    def model(self, name: str, n: int, part: str = "total") -> float:
        """Seconds for one allreduce of n float32 elements sent as `name`: the cost model's
        alpha-beta and codec terms from the calibration (`part`: one of them)."""
        c = self.calibration
        enc, dec, sm = c.rate(name)
        bw = c.bandwidth if name in cost.UNCOMPRESSED else c.gather_bandwidth
        return cost.allreduce_time(name, n, c.ranks, alpha=c.alpha, bandwidth=bw, encode_rate=enc,
                                   decode_rate=dec, sum_rate=sm)[part]

    def fit(self, name: str, n: int = SMALL) -> Tuple[float, float]:
        """(a, k): the model's line for this path moved through its measured allreduces around n,
        a + k * model(n): a holds the path's fixed costs (host calls, extra collectives, kernel
        launches), k what the model misses per element (Horovod summing halves element by
        element on the CPU for fp16, say); above LARGE through the LARGE and HUGE points where
        both were measured. With one measurement: the model plus its excess."""
        c = self.calibration
        points = [(size, dict(ts).get(name)) for size, ts in ((SMALL, c.small), (LARGE, c.large), (HUGE, c.huge))]
        points = [(size, t) for size, t in points if t is not None]
        lo = 1 if len(points) == 3 and n > LARGE else 0
        key = (name, lo)
        if key not in self._fit:
            if not points:
                self._fit[key] = (0.0, 1.0)
            elif len(points) == 1:
                self._fit[key] = (max(0.0, points[0][1] - self.model(name, points[0][0])), 1.0)
            else:
                (n0, t0), (n1, t1) = points[lo], points[lo + 1]
                m0, m1 = self.model(name, n0), self.model(name, n1)
                k = (t1 - t0) / (m1 - m0) if m1 > m0 and t1 > t0 else 1.0
                self._fit[key] = (t0 - k * m0, k)
        return self._fit[key]

    def predict(self, name: str, n: int, step: int = 0) -> float:
        """Predicted seconds of one allreduce of n elements sent as `name`; within a step of
        `step` elements reduced together, Horovod's own paths (none, fp16) cost their share of
        the message Horovod fuses them into (up to its fusion threshold): on a CPU-bound link a
        64 MiB message moves at half the rate per element of a 16 MiB one (and where the probe
        fuses, its HUGE point is such a message, fusion buffer copies included). fp16's casts
        count in full: on a fast link there is too little transfer to hide them (2 hosts at
        10 Gbit/s, AVX2: leaving them out put ResNet-50's fp16 step at 91 ms, measured 118). A
        quantized bucket costs what a lone tensor of its size does: its members are encoded
        where they lie and its sum split without copies (collective.bucket_parts)."""
        if name in cost.UNCOMPRESSED:
            fused = min(step, fusion_elements(name))
            if fused > n:
                moved = max(self.predict(name, fused), self.model(name, fused))
                return n / fused * moved
        a, k = self.fit(name, n)
        return a + k * self.model(name, n)

    def choose(self, n: int, step: int = 0) -> Choice:
        """The format for a bucket of n elements (alone, or within a step of `step` elements)."""
        key = (int(n), int(step))
        if key not in self._cache:
            self._cache[key] = self._choose(*key)
        return self._cache[key]

    def choose_step(self, sizes: Sequence[int]) -> List[Choice]:
        """Each bucket's format, for buckets reduced together in one step: one format for every
        bucket it compresses unless mixing formats is predicted MARGIN faster. The model prices
        each path apart, and a step runs them at once: Horovod's allreduce of the fp16 buckets
        beside the alltoalls of the q8 ones. Steps of 6 q8 and 2 fp16 buckets ran 7.2% and 5.1%
        behind all q8 on 2 unshaped hosts (docs/runs/auto/2026-12-06-7655ec7/none_avx2.log,
        2026-12-06-e38f744/none_avx512.log)."""
        step = sum(int(n) for n in sizes)
        chosen = [self.choose(n, step) for n in sizes]
        free = [] if self.forced else [k for k, n in enumerate(sizes) if not self._too_small(int(n))]
        # in allowed order, not a set's: ties go to the first allowed on every rank (a set of
        # strings iterates in an order that differs between processes)
        names = [a for a in self.auto.allow if any(chosen[k].name == a for k in free)]
        if len(names) < 2:
            return chosen
        predicted = [dict(chosen[k].predicted) for k in free]
        total = {name: sum(p[name] for p in predicted) for name in names}
        mixed = sum(p[chosen[k].name] for k, p in zip(free, predicted))
        one = min(names, key=total.get)
        if mixed * (1 + MARGIN) <= total[one]:
            return chosen
        for k in free:
            c = chosen[k]
            chosen[k] = Choice(c.n, one, c.predicted, UNIFORM)
        return chosen

    def _too_small(self, n: int) -> bool:
        """A bucket under min_size elements goes plain, whatever the model predicts."""
        return n < max(self.auto.min_size, 1)

    def _choose(self, n: int, step: int = 0) -> Choice:
        allow = self.auto.allow
        predicted = tuple((a, self.predict(a, n, step)) for a in allow)
        if self._too_small(n):
            plain = "none" if "none" in allow else allow[0]
            sent = "" if plain == "none" else f": sent uncompressed, as {plain} sends tensors under its min_size"
            return Choice(n, plain, predicted, f"fewer than min_size={self.auto.min_size} elements{sent}")
        if self.forced:
            return Choice(n, self.forced, predicted, f"{OVERRIDE_ENV}={self.forced}")
        best = min(predicted, key=lambda kv: kv[1])  # ties: the first allowed
        plain = dict(predicted).get("none")
        if plain is not None and best[0] != "none" and plain <= best[1] * (1 + MARGIN):
            return Choice(n, "none", predicted, f"within {MARGIN:.0%} of the least predicted time")
        return Choice(n, best[0], predicted, "least predicted time")

    def classes(self, top: int = RANGE_TOP) -> List[Tuple[int, int, Choice]]:
        """(first, last, choice at first) for each run of bucket sizes with one choice and reason,
        from 1 element to `top`: boundaries found by bisection between powers of two."""
        def kind(n: int) -> Tuple[str, str]:
            ch = self.choose(n)
            return ch.name, ch.reason

        out: List[Tuple[int, int, Choice]] = []
        lo, current, pos = 1, kind(1), 1
        while pos < top:
            hi = min(2 * pos, top)
            if kind(hi) == current:
                pos = hi
                continue
            a, b = pos, hi  # kind(a) is current, kind(b) is not
            while b - a > 1:
                m = (a + b) // 2
                a, b = (m, b) if kind(m) == current else (a, m)
            out.append((lo, a, self.choose(lo)))
            lo, current, pos = b, kind(b), b  # from b again: another change may lie before hi
        out.append((lo, top, self.choose(lo)))
        return out

    def describe(self) -> List[str]:
        """One line per decision class: size range -> format, with every candidate's prediction."""
        c = self.calibration
        lines = [f"horovod_q8 Auto: {c.ranks} ranks, link alpha {c.alpha * 1e6:.0f} us, "
                 f"ring {c.bandwidth * 8 / 1e9:.2f} Gbit/s, allgather {c.gather_bandwidth * 8 / 1e9:.2f} Gbit/s, "
                 + ("calibration restored from a checkpoint" if self.restored else
                    f"calibration measured in {c.seconds * 1e3:.0f} ms") + "; each path's model x "
                 + ", ".join(f"{name} {self.fit(name)[1]:.2f}" for name in self.auto.allow)]
        for first, last, ch in self.classes():
            at = last if last < RANGE_TOP else max(first, min(last, 1 << 24))
            preds = ", ".join(f"{name} {self.predict(name, at) * 1e3:.3g} ms" for name in self.auto.allow)
            lines.append(f"horovod_q8 Auto: {first:,}-{last:,} elements -> {ch.name} ({ch.reason}; "
                         f"at {at:,}: {preds})")
        return lines

    def describe_step(self, sizes: Sequence[int]) -> str:
        """One line for a step's buckets: what each format was chosen for, with the largest
        bucket's predictions (Horovod's own paths as their share of its fused message)."""
        choices = self.choose_step(sizes)
        if not choices:
            return "horovod_q8 Auto: a step of no buckets"
        picks = Counter(ch.name for ch in choices)
        big = max(choices, key=lambda ch: ch.n)
        preds = ", ".join(f"{name} {t * 1e3:.3g} ms" for name, t in big.predicted)
        why = sorted({ch.reason for ch in choices})  # e.g. the override, or one format for the step
        return (f"horovod_q8 Auto: a step of {len(choices)} buckets, {sum(sizes):,} elements -> "
                + ", ".join(f"{name} for {k} of {len(choices)}" for name, k in picks.items())
                + f" (at {big.n:,}: {preds}; {'; '.join(why)})")

    def fingerprint(self) -> dict:
        """What every rank must hold alike: the setting, the calibration, the choices by size and
        Horovod's fusion threshold (a step's choices depend on it)."""
        return {"auto": self.auto.fingerprint(), "calibration": self.calibration.digest(),
                "classes": [[a, b, ch.name] for a, b, ch in self.classes()],
                f"{FUSION_ENV} (elements)": fusion_elements("none")}  # named as the user sets it


class AutoState:
    """One Auto compressor's plan: made once at first use, on every rank together, from a saved
    calibration (`load_state_dict`) or a fresh one; `recalibrate()` (on every rank) drops it."""

    def __init__(self, auto: Auto) -> None:
        self.auto = auto
        self.plan: Optional[AutoPlan] = None
        self.loaded: Optional[Calibration] = None
        self.logged: set = set()  # the steps whose choices were logged under this plan
        self.note: Optional[str] = None  # why a checkpoint's calibration was not taken, said at the next plan
        self.remeasure = False  # recalibrate() asked: a frontend's own saved copy is not taken either

    def ensure(self, probe: Callable[[], Probe], agree: Callable[[object, str], None],
               log: Optional[Callable[[str], None]] = None) -> AutoPlan:
        """The plan, calibrating first if needed. agree(statement, label) raises on every rank
        when ranks differ (collective.agreement), so that ranks never run different collectives:
        first the setting and whether a saved calibration is used, then the decisions."""
        if self.plan is not None:
            return self.plan
        agree({"auto": self.auto.fingerprint()}, "auto.start")
        override(self.auto.allow)  # every rank has the same value by now: all stop, before measuring
        if self.note is not None and log is not None:
            log(self.note)
        self.note = None
        p = probe()
        saved = self._rank0_saved(p, log)
        calibration = saved or calibrate(p, self.auto.allow)
        plan = AutoPlan(self.auto, calibration, restored=saved is not None)
        agree(plan.fingerprint(), "auto.plan")
        if log is not None:
            for line in plan.describe():
                log(line)
        self.plan, self.remeasure = plan, False
        return plan

    def _rank0_saved(self, probe: Probe, log: Optional[Callable[[str], None]]) -> Optional[Calibration]:
        """Rank 0's saved calibration, for every rank (Horovod's resume restores on rank 0 and
        broadcasts the weights; the others then hold none), unless it was measured with another
        number of ranks: its figures (a sum of that many parts, that schedule) would price this run wrong."""
        offered = probe.gather(None if self.loaded is None else self.loaded.to_dict())[0]
        saved = None if offered is None else Calibration.from_dict(offered)
        if saved is not None and saved.ranks != probe.ranks:
            if log is not None:
                log(f"horovod_q8 Auto: the saved calibration was measured on {saved.ranks} ranks, this run has "
                    f"{probe.ranks}: measuring again")
            saved = None
        return saved

    def recalibrate(self) -> None:
        """Measure again at the next use (call it on every rank, at the same point)."""
        self.plan, self.loaded, self.remeasure = None, None, True
        self.logged.clear()

    def state_dict(self) -> dict:
        c = self.plan.calibration if self.plan is not None else self.loaded
        return {"auto": self.auto.fingerprint(), "calibration": None if c is None else c.to_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Use a saved calibration (the same choices as the run that saved it)."""
        if state.get("calibration") is None:
            return
        self.remeasure = False
        saved = dict(state.get("auto", {}).get("auto", {}))
        mine = self.auto.fingerprint()["auto"]
        self.plan = None
        if saved and (saved.get("allow"), saved.get("min_size")) != (mine["allow"], mine["min_size"]):
            self.loaded = None  # its figures cover other formats: measured again
            self.note = (f"horovod_q8 Auto: the checkpoint's calibration was made for allow={saved.get('allow')}, "
                         f"min_size={saved.get('min_size')}; this run has allow={mine['allow']}, "
                         f"min_size={mine['min_size']}: measuring again")
            return
        self.loaded = Calibration.from_dict(state["calibration"])


def choices_by_link(rates: Sequence[Tuple[str, ...]], allow: Sequence[str] = DEFAULT_ALLOW,
                    n: int = 1 << 22, ranks: int = 2, alpha: float = 50e-6) -> List[Tuple[float, float, str]]:
    """(from, to Gbit/s, format) Auto would choose for a bucket of n elements over links from 0.1
    to about 1300 Gbit/s (ranges meet; the first starts at 0, the last ends at inf), with these
    codec rates and no fixed costs: what `horovod-q8 doctor` shows before a job measures a link."""
    grid = [0.1 * 2 ** (k / 4) for k in range(55)]  # 0.1 .. ~1300 Gbit/s
    out: List[Tuple[float, float, str]] = []
    for gbit in grid:
        bw = gbit * cost.GBIT
        name = AutoPlan(Auto(tuple(allow)), Calibration(ranks, alpha, bw, bw, tuple(rates))).choose(n).name
        if out and out[-1][2] == name:
            continue
        if out:
            out[-1] = (out[-1][0], gbit, out[-1][2])
        out.append((0.0 if not out else gbit, math.inf, name))
    return out


_STATES: Dict[Auto, AutoState] = {}


def recalibrate_all() -> None:
    """Every Auto setting of this process measures again at its next use (the ranks changed:
    call it on every rank at the same point)."""
    for state in _STATES.values():
        state.recalibrate()


def make_auto(allow: Sequence[str] = DEFAULT_ALLOW, min_size: int = 1024, **options) -> Auto:
    """An Auto setting; options are those of the quantized formats it may choose, each passed to
    the formats it applies to, and refused when it applies to none of them."""
    unknown = set(options) - set(CODEBOOK_OPTIONS + THRESHOLD_OPTIONS + SETTING_OPTIONS)
    if unknown:
        known = ", ".join(sorted(("allow", "min_size") + CODEBOOK_OPTIONS + THRESHOLD_OPTIONS + SETTING_OPTIONS))
        raise TypeError(f"Auto: unknown option(s) {sorted(unknown)}; options: {known}")
    given = {k: v for k, v in options.items() if v is not None}
    kinds = {formats.get(a).kind for a in check_allow(allow) if a not in cost.UNCOMPRESSED}
    for k in given:
        if (k in CODEBOOK_OPTIONS and formats.CODEBOOK not in kinds
                or k in THRESHOLD_OPTIONS and formats.THRESHOLD not in kinds
                or k in SETTING_OPTIONS and not kinds):
            raise ValueError(f"Auto: {k}= applies to none of the formats it may choose ({', '.join(allow)})")
    return Auto(tuple(allow), min_size, tuple(given.items()))


@dataclass(frozen=True)
class AutoCompressorBase(Auto):
    """What the frontends' Auto compressors share: equal settings share one plan (`auto_state`);
    `compressors` maps each allowed name to the frontend's compressor for it (`_compressors`)."""

    auto_state: object = field(default=None, compare=False, repr=False)
    compressors: object = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        base = Auto(self.allow, self.min_size, self.options)
        object.__setattr__(self, "auto_state", _STATES.setdefault(base, AutoState(base)))
        object.__setattr__(self, "compressors", self._compressors())

    def _compressors(self) -> dict:
        raise NotImplementedError

    def plan(self) -> "AutoPlan":
        """Calibrate at first use (every rank together), then the fixed plan."""
        raise NotImplementedError

    @property
    def level_groups(self) -> bool:
        """Whether a bucket must hold one layer group (an allowed format quantizes per group)."""
        return any(getattr(c, "format", None) is not None and c.format.level_groups
                   for c in self.compressors.values())

    def compressor_for(self, name: str):
        """The frontend's compressor for a chosen format's name."""
        return self.compressors[name]

    def chosen_for_step(self, sizes: Sequence[int], label: str = "",
                        log: Optional[Callable[[str], None]] = None) -> list:
        """The compressor chosen for each of a step's buckets of these sizes (`compressor_for`);
        with a label, `log` gets the step's choices once per label and sizes."""
        plan = self.plan()
        choices = plan.choose_step(sizes)
        key = (label, tuple(sizes))
        if label and log is not None and key not in self.auto_state.logged:
            self.auto_state.logged.add(key)
            log(f"{plan.describe_step(sizes)} [{label}]")
        return [self.compressor_for(ch.name) for ch in choices]

    def recalibrate(self) -> None:
        """Measure again at the next use; call it on every rank at the same point."""
        self.auto_state.recalibrate()

    def state_dict(self) -> dict:
        """The calibration, for a checkpoint: a resumed run loading it makes the same choices."""
        return self.auto_state.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.auto_state.load_state_dict(state)
