"""Horovod generations: elastic Horovod (`hvd.elastic.run`) re-initialises Horovod when ranks come
or go (shutdown, then init), and a rank that joins builds its optimizer while the others keep
theirs. Each re-initialisation starts a new generation in this process; what horovod_q8 agreed
with the other ranks, its transports (which hold the rank and the rank count) and its in-flight
collectives belong to one generation, and are dropped or agreed again in the next.

Under elastic Horovod (HOROVOD_ELASTIC=1) nothing of horovod_q8 runs a collective when it is
built: a joining rank builds while the others re-synchronise, and Horovod allows no collective
there. Its agreements run at the first step of each generation instead, on every rank together.
"""
from __future__ import annotations

import inspect
import os
import weakref
from typing import Callable, List

_current = 0
_listeners: List[Callable[[], Callable[[], None] | None]] = []  # weak references to callbacks


def elastic() -> bool:
    """Whether this process runs under elastic Horovod (horovodrun --min-np/--max-np sets it)."""
    return os.environ.get("HOROVOD_ELASTIC", "0") not in ("", "0")


def current() -> int:
    """This process's generation: 0 from the start, one more after each elastic reset."""
    return _current


def on_new(callback: Callable[[], None]) -> None:
    """Run `callback` at each new generation, while its owner lives (a bound method is held weakly)."""
    ref = weakref.WeakMethod(callback) if inspect.ismethod(callback) else (lambda: callback)
    _listeners.append(ref)


def advance() -> None:
    """A new generation (Horovod was initialised again): every listener alive runs, in order."""
    global _current
    _current += 1
    alive = [ref for ref in _listeners if ref() is not None]
    _listeners[:] = alive
    for ref in alive:
        fn = ref()
        if fn is not None:
            fn()


class Numbering:
    """1, 2, 3, ... within a generation, from 1 again in the next: collective names that a rank
    which joined forms as the others do."""

    def __init__(self) -> None:
        self._generation, self._n = 0, 0

    def __call__(self) -> int:
        if self._generation != _current:
            self._generation, self._n = _current, 0
        self._n += 1
        return self._n
