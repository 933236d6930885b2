"""The TensorFlow transport's pieces: one result filled by a chain of host calls, not joined."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("horovod.tensorflow")

from horovod_q8.tensorflow import transport as T  # noqa: E402

SIZES = [5000, 5000, 123]
PARTS = [np.arange(s, dtype=np.float32) + 10_000 * k for k, s in enumerate(SIZES)]



def transport() -> "T.HorovodTransport":
    """The transport of rank 0 of 1, without hvd.init(): finish() runs host calls only, and an
    MPI singleton in the test process would leak OMPI_* variables into later tests' mpirun."""
    t = T.HorovodTransport.__new__(T.HorovodTransport)
    t.rank, t.size, t.named = 0, 1, False
    return t


def fill(out, x):
    """What a piece's last local step does: write its elements into `out`."""
    out[...] = x
    return out


def finish() -> tf.Tensor:
    steps = [(fill, [tf.constant(p)]) for p in PARTS]
    return transport().finish("fill", steps, SIZES, "test")


def test_pieces_fill_one_buffer_without_a_copy(monkeypatch):
    made = []
    real = T.aligned_empty
    monkeypatch.setattr(T, "aligned_empty", lambda n, dtype: made.append(n) or real(n, dtype))
    np.testing.assert_array_equal(tf.function(finish)().numpy(), np.concatenate(PARTS))
    assert made == [sum(SIZES)], made  # one result buffer, handed on by every piece, never copied


def test_eagerly_the_pieces_are_copied_on_and_still_right():
    np.testing.assert_array_equal(finish().numpy(), np.concatenate(PARTS))  # eager calls do not alias


def test_a_copied_buffer_still_gives_the_whole_result(monkeypatch):
    class Forgets(dict):  # as if TensorFlow had copied every buffer instead of aliasing it
        def __setitem__(self, key, value):
            pass

    monkeypatch.setattr(T, "_PASSED", Forgets())
    np.testing.assert_array_equal(tf.function(finish)().numpy(), np.concatenate(PARTS))


def test_one_piece_is_one_host_call():
    y = transport().finish("fill", [(fill, [tf.constant(PARTS[0])])], SIZES[:1], "one")
    np.testing.assert_array_equal(y.numpy(), PARTS[0])
