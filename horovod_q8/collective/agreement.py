"""Ranks agree on what they compress before they compress it, or every rank stops, saying why.

A rank that compresses a tensor runs collectives that a rank sending it uncompressed never
joins; Horovod's and Gloo's collectives cannot time out, so a disagreement would hang the job.
So each frontend states, at the points where every rank passes in the same order (an optimizer
built, the first allreduce with a given compression, a DDP hook's first bucket), what it will do,
and ranks exchange these statements: a difference is a `ConfigMismatchError` on every rank. A
rank that never joins (it does not use horovod_q8 at all) is caught by `watchdog`: after
`timeout_s()` seconds the waiting rank ends its process with a message, and the launcher ends
the others.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any, Callable, Dict, Iterator, Sequence

from horovod_q8.collective.auto import Auto
from horovod_q8.collective.setting import Setting, difference

TIMEOUT_ENV = "HOROVOD_Q8_CHECK_TIMEOUT_S"
_BUILTIN = {"NoneCompressor": "none", "FP16Compressor": "fp16"}  # Horovod's own, TF and torch


class ConfigMismatchError(ValueError):
    """Ranks were started with different compression settings."""

    ag_pass_through = True  # TensorFlow: raise as is from inside tf.function, not as a StagingError


def timeout_s() -> float:
    """Seconds a rank waits for every rank's statement (HOROVOD_Q8_CHECK_TIMEOUT_S, default 60)."""
    value = os.environ.get(TIMEOUT_ENV, "60")
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise ValueError(f"{TIMEOUT_ENV}={value!r} must be a positive number of seconds")
    return seconds


def describe(compression: Any) -> Any:
    """What a compression does, as plain JSON values: a horovod_q8 setting's fingerprint, or the
    name of Horovod's own compressor (or of any other class)."""
    if isinstance(compression, (Setting, Auto)):
        return compression.fingerprint()
    cls = compression if isinstance(compression, type) else type(compression)
    return _BUILTIN.get(cls.__name__, f"{cls.__module__}.{cls.__qualname__}")


# Statement keys that describe the model's gradients, not the compression settings.
MODEL_KEYS = ("gradients", "buckets", "parameters")


def _model_only(mine: Any, theirs: Any) -> bool:
    """The statements differ only where they describe the gradients (the settings agree)."""
    if not (isinstance(mine, dict) and isinstance(theirs, dict)):
        return False
    differ = {k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k)}
    return bool(differ) and differ <= set(MODEL_KEYS)


def _is_auto(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"auto"}


def _short(value: Any) -> str:
    """A fingerprint as its format's name (or Auto's allowed formats); anything else as itself."""
    if isinstance(value, dict) and isinstance(value.get("format"), dict):
        return f"horovod_q8 {value['format'].get('name')!r}"
    if _is_auto(value) and isinstance(value["auto"], dict):
        return f"horovod_q8 Auto (allow {value['auto'].get('allow')})"
    return repr(value)


def _detail(mine: Any, theirs: Any, prefix: str = "") -> str:
    if isinstance(mine, dict) and isinstance(theirs, dict):
        keys = sorted(set(mine) | set(theirs))
        kinds = [k for k in keys if isinstance(mine.get(k), dict) != isinstance(theirs.get(k), dict)
                 or _is_auto(mine.get(k)) != _is_auto(theirs.get(k))]
        if not kinds:
            return difference(mine, theirs, prefix)
        return "; ".join(f"{prefix}{k}={_short(mine.get(k))} here vs {_short(theirs.get(k))} there" for k in kinds)
    return f"{prefix or 'statement '}{_short(mine)} here vs {_short(theirs)} there"


def check_same(mine: Any, everyone: Sequence[Any], rank: int) -> None:
    """Raise ConfigMismatchError naming the first rank whose statement differs from mine."""
    for other, theirs in enumerate(everyone):
        if theirs != mine:
            detail = _detail(mine, theirs)
            if _model_only(mine, theirs):
                raise ConfigMismatchError(
                    f"horovod_q8: rank {rank} and rank {other} reduce different gradients: {detail}. Every rank "
                    "must hand its optimizer the same variables in the same order, each with a gradient or "
                    "each without (a variable unused on some ranks only, a model built differently, or DDP's "
                    "bucket_cap_mb set differently); "
                    "Horovod's own allreduce would wait forever here.")
            raise ConfigMismatchError(
                f"horovod_q8: rank {rank} and rank {other} use different compression settings: {detail}. "
                "Start every rank with the same compression options (a rank that compresses runs "
                "collectives that an uncompressed rank never joins).")


@contextlib.contextmanager
def watchdog(seconds: float, rank: int, what: str) -> Iterator[None]:
    """End this process with a message if the block does not finish within `seconds`."""
    done = threading.Event()

    def bite() -> None:
        if done.wait(seconds):
            return
        sys.stderr.write(
            f"horovod_q8: rank {rank} waited {seconds:g} s for every rank at {what}. Likely cause: another "
            "rank does not use horovod_q8 there (Horovod's own compression, or horovod_q8 not imported), "
            "or it uses other settings, or it is stuck elsewhere. Start every rank with the same "
            f"compression options; {TIMEOUT_ENV} changes the wait. Ending this process.\n")
        sys.stderr.flush()
        os._exit(3)  # the launcher (horovodrun, mpirun, torchrun) then ends the other ranks

    threading.Thread(target=bite, name="horovod_q8.watchdog", daemon=True).start()
    try:
        yield
    finally:
        done.set()


class Agreements:
    """Numbered statements per label, so every rank's k-th statement at a label meets the others'."""

    def __init__(self) -> None:
        self._count: Dict[str, int] = {}
        self._seen: Dict[str, set] = {}
        self._lock = threading.Lock()

    def agree(self, gather: Callable[[Any, str], Sequence[Any]], rank: int, mine: Any, label: str) -> None:
        """gather(obj, name) -> every rank's obj (an allgather_object); mismatch raises everywhere."""
        name = self.name(label)
        with watchdog(timeout_s(), rank, f"the collective {name!r}"):
            everyone = gather(mine, name)
        check_same(mine, everyone, rank)

    def name(self, label: str) -> str:
        """The next collective's name at `label`: the same on every rank that states in the same order."""
        with self._lock:
            k = self._count[label] = self._count.get(label, 0) + 1
        return f"horovod_q8.agree.{label}.{k}"

    def reset(self) -> None:
        """Forget every statement made (a new generation of ranks states them again, numbered from 1)."""
        with self._lock:
            self._count.clear()
            self._seen.clear()

    def once(self, gather: Callable[[Any, str], Sequence[Any]], rank: int, mine: Any, label: str) -> None:
        """`agree`, the first time this rank states `mine` at `label` (later uses are free)."""
        key = repr(mine)
        with self._lock:
            if key in self._seen.setdefault(label, set()):
                return
        self.agree(gather, rank, mine, label)
        with self._lock:
            self._seen[label].add(key)
