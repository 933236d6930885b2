"""Small datasets written in the real file formats, for the loader and training tests.

Images carry their class (brightness and a stripe), so a model can learn them in a few steps.
"""
from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np


def images(n: int, shape: tuple, classes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.integers(0, 60, (n, *shape)).astype(np.int64)
    for i, c in enumerate(y):
        x[i] += int(180 * c / max(classes - 1, 1))
        x[i, c % shape[0]] = 255
    return np.clip(x, 0, 255).astype(np.uint8), y


def write_idx(path: Path, array: np.ndarray, gz: bool) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    data = header + array.astype(np.uint8).tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def mnist(folder: Path, n_train: int = 512, n_test: int = 128, gz: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    sfx = ".gz" if gz else ""
    for split, n, seed in (("train", n_train, 0), ("t10k", n_test, 1)):
        x, y = images(n, (28, 28), 10, seed)
        write_idx(folder / f"{split}-images-idx3-ubyte{sfx}", x, gz)
        write_idx(folder / f"{split}-labels-idx1-ubyte{sfx}", y, gz)
    return folder


def cifar10(folder: Path, per_batch: int = 64, protocol: int = pickle.DEFAULT_PROTOCOL) -> Path:
    d = folder / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        x, y = images(per_batch, (32, 32, 3), 10, i)
        batch = {b"data": x.transpose(0, 3, 1, 2).reshape(per_batch, -1), b"labels": list(map(int, y))}
        with open(d / name, "wb") as f:
            pickle.dump(batch, f, protocol=protocol)
    return folder


def _jpeg(x: np.ndarray) -> bytes:
    import tensorflow as tf
    return tf.io.encode_jpeg(tf.constant(x)).numpy()


def imagenet_folders(folder: Path, classes: int = 2, per_class: int = 24, size: int = 40) -> Path:
    for split, seed in (("train", 0), ("val", 1)):
        x, y = images(per_class * classes, (size, size, 3), classes, seed)
        for i, (img, c) in enumerate(zip(x, y)):
            d = folder / split / f"n{c:08d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"img_{i}.JPEG").write_bytes(_jpeg(img))
    return folder


def imagenet_tfrecords(folder: Path, classes: int = 2, n: int = 48, size: int = 40) -> Path:
    import tensorflow as tf

    folder.mkdir(parents=True, exist_ok=True)
    for name, seed in (("train-00000-of-00001", 0), ("validation-00000-of-00001", 1)):
        x, y = images(n, (size, size, 3), classes, seed)
        with tf.io.TFRecordWriter(str(folder / name)) as w:
            for img, c in zip(x, y):
                ex = tf.train.Example(features=tf.train.Features(feature={
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[_jpeg(img)])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(c) + 1])),
                }))
                w.write(ex.SerializeToString())
    return folder
