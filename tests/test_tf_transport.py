"""The TensorFlow transport: pieces fill one result by a chain of host calls, not joined; host
calls' buffers are reused across steps, never while TensorFlow still holds them, in a graph and
eagerly."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("horovod.tensorflow")

from horovod_q8.collective.transport import AlignedPool  # noqa: E402
from horovod_q8.tensorflow import transport as T  # noqa: E402
from parallel.graph_edges import ancestors  # noqa: E402

SIZES = [5000, 5000, 123]
PARTS = [np.arange(s, dtype=np.float32) + 10_000 * k for k, s in enumerate(SIZES)]



def transport() -> "T.HorovodTransport":
    """The transport of rank 0 of 1, without hvd.init(): finish() runs host calls only, and an
    MPI singleton in the test process would leak OMPI_* variables into later tests' mpirun."""
    t = T.HorovodTransport.__new__(T.HorovodTransport)
    t.rank, t.size, t.named, t.order = 0, 1, False, None
    return t


def fill(out, x):
    """What a piece's last local step does: write its elements into `out`."""
    out[...] = x
    return out


def finish(offset=0.0) -> tf.Tensor:
    steps = [(fill, [tf.constant(p) + offset]) for p in PARTS]
    return transport().finish("fill", steps, SIZES, "test")


class CountingPool(AlignedPool):
    def __init__(self):
        super().__init__()
        self.sizes = []

    def __call__(self, size, dtype):
        self.sizes.append(size)
        return super().__call__(size, dtype)


def test_pieces_fill_one_buffer_without_a_copy(monkeypatch):
    pool = CountingPool()
    monkeypatch.setattr(T, "_POOL", pool)
    # An argument, not constants, as in a training step: TensorFlow may evaluate a stateless
    # op of constants while it optimises the graph, and it would hand the pieces a copy.
    np.testing.assert_array_equal(tf.function(finish)(tf.constant(0.0)).numpy(), np.concatenate(PARTS))
    assert pool.sizes == [sum(SIZES)], pool.sizes  # one result buffer, handed on by every piece, never copied


def test_a_result_still_held_is_never_overwritten(monkeypatch):
    """The next step gets another buffer while TensorFlow (here: our tensor) holds the last
    result, and the same one again once nothing does."""
    pool = AlignedPool()
    monkeypatch.setattr(T, "_POOL", pool)
    step = tf.function(finish)
    first = step(tf.constant(0.0))
    second = step(tf.constant(1.0))  # while `first` is alive
    np.testing.assert_array_equal(first.numpy(), np.concatenate(PARTS))
    np.testing.assert_array_equal(second.numpy(), np.concatenate(PARTS) + 1)
    held = pool.held_bytes()
    assert held >= 2 * 4 * sum(SIZES)
    del first, second
    for k in range(5):
        np.testing.assert_array_equal(step(tf.constant(float(k))).numpy(), np.concatenate(PARTS) + k)
    assert pool.held_bytes() == held  # reused, not grown


def test_eagerly_the_pieces_fill_one_buffer_too(monkeypatch):
    """Eager host calls read the tensors' memory and return tensors over their arrays
    (tf.numpy_function would copy both ways: 17.7 ms per 16 MiB result)."""
    pool = CountingPool()
    monkeypatch.setattr(T, "_POOL", pool)
    np.testing.assert_array_equal(finish().numpy(), np.concatenate(PARTS))
    assert pool.sizes == [sum(SIZES)], pool.sizes


def test_eagerly_a_result_still_held_is_never_overwritten(monkeypatch):
    pool = AlignedPool()
    monkeypatch.setattr(T, "_POOL", pool)
    first = finish()
    second = finish(1.0)  # while `first` is alive: it holds its buffer
    np.testing.assert_array_equal(first.numpy(), np.concatenate(PARTS))
    np.testing.assert_array_equal(second.numpy(), np.concatenate(PARTS) + 1)
    held = pool.held_bytes()
    del first, second
    for k in range(5):
        np.testing.assert_array_equal(finish(float(k)).numpy(), np.concatenate(PARTS) + k)
    assert pool.held_bytes() == held  # reused once nothing held it, not grown


def test_an_eager_result_shares_memory_only_where_tensorflow_can_alias_it():
    from horovod_q8.tensorflow.bridge import _as_tensor

    owned = AlignedPool()(8, np.float32)
    owned[:] = 1.0
    t = _as_tensor(owned, tf.float32)
    owned[0] = 5.0
    assert t.numpy()[0] == 5.0  # the same memory
    readonly = np.ones(8, np.float32)
    readonly.flags.writeable = False
    unaligned = AlignedPool()(9, np.float32)[1:]
    for a, dtype in ((readonly, tf.float32), (unaligned, tf.float32), (np.ones(8, np.float64), tf.float32),
                     (np.zeros(0, np.float32), tf.float32)):
        c = _as_tensor(a, dtype)
        assert c.dtype == dtype and c.shape == a.shape
        if a.size:
            a_before = float(a[0])
            if a.flags.writeable:
                a[0] = 9.0
            assert c.numpy()[0] == a_before  # a copy: later writes do not reach it


def test_a_copied_buffer_still_gives_the_whole_result(monkeypatch):
    class Forgets(dict):  # as if TensorFlow had copied every buffer instead of aliasing it
        def __setitem__(self, key, value):
            pass

    monkeypatch.setattr(T, "_PASSED", Forgets())
    np.testing.assert_array_equal(tf.function(finish)().numpy(), np.concatenate(PARTS))


def test_one_piece_is_one_host_call():
    y = transport().finish("fill", [(fill, [tf.constant(PARTS[0])])], SIZES[:1], "one")
    np.testing.assert_array_equal(y.numpy(), PARTS[0])


def test_independent_host_calls_are_not_chained():
    """Two buckets' local steps may run at once: tf.function chains stateful ops that have no
    resource input in program order, which made each bucket's encode wait for the previous
    bucket's decode."""
    t = transport()

    @tf.function
    def two(a, b):
        return (t.local("first", lambda x, r, s: x * 2, [a], (4, np.float32)),
                t.local("second", lambda x, r, s: x * 3, [b], (4, np.float32)))

    spec = tf.TensorSpec([4], tf.float32)
    graph = two.get_concrete_function(spec, spec).graph
    calls = [op for op in graph.get_operations() if op.type.startswith("PyFunc")]
    assert len(calls) == 2
    assert not any(c in op.control_inputs for op in calls for c in calls)
    one = tf.ones(4)
    np.testing.assert_array_equal([y.numpy() for y in two(one, one)], [np.full(4, 2.0), np.full(4, 3.0)])


def test_a_phase_runs_in_build_order_and_phases_overlap():
    """With a PhaseOrder, each bucket's encode waits for the previous bucket's encode (so every
    rank submits its collectives in one order), never for another phase's host call."""
    t = transport()
    t.order = T.PhaseOrder()

    @tf.function
    def buckets(a, b, c):
        out = []
        for x in (a, b, c):
            e = t.local("encode", lambda v, r, s: v * 2, [x], (4, np.float32))
            out.append(t.local("decode", lambda v, r, s: v + 1, [e], (4, np.float32)))
        return out

    spec = tf.TensorSpec([4], tf.float32)
    graph = buckets.get_concrete_function(spec, spec, spec).graph
    calls = [op for op in graph.get_operations() if op.type.startswith("PyFunc")]
    enc = [op for op in calls if op.name.startswith("encode")]
    dec = [op for op in calls if op.name.startswith("decode")]
    assert len(enc) == len(dec) == 3
    for k in (1, 2):
        assert ancestors(enc[k - 1]) < ancestors(enc[k]) and enc[k - 1] in ancestors(enc[k])
        assert dec[k - 1] in ancestors(dec[k])
        assert not ancestors(enc[k]) & set(dec)  # no encode waits for a decode
    one = tf.ones(4)
    np.testing.assert_array_equal([y.numpy() for y in buckets(one, one * 2, one * 3)],
                                  [np.full(4, 3.0), np.full(4, 5.0), np.full(4, 7.0)])
