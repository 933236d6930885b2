"""Real dataset loaders (MNIST IDX, CIFAR-10 python batches, ImageNet JPEG folders and
TFRecords) and synthetic data of the same shapes. A missing or malformed dataset raises
DatasetError naming the file and saying what was expected; shapes, counts and label
ranges are checked when loading, so a bad file never fails in the middle of training."""
from __future__ import annotations

import gzip
import math
import pickle
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple

import numpy as np

from horovod_q8.errors import UserError

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
MNIST_FILES = {"train_x": "train-images-idx3-ubyte", "train_y": "train-labels-idx1-ubyte",
               "test_x": "t10k-images-idx3-ubyte", "test_y": "t10k-labels-idx1-ubyte"}
IMAGENET_SIZE = 224
IMAGENET_CLASSES = 1000
IMAGENET_TRAIN_SHARDS = 1024  # build_imagenet_data's train-00000-of-01024 ...
CLASSES = 10  # MNIST and CIFAR-10
CIFAR_SHAPE = (3, 32, 32)  # one row of a batch's data: 1024 red, 1024 green, 1024 blue
# What a CIFAR-10 batch pickle may reference: numpy arrays and nothing else. Pickle can
# call any importable function, so a crafted "dataset" must not run code here.
_CIFAR_PICKLE_GLOBALS = {(f"numpy.{core}.{module}", name) for core in ("core", "_core")
                         for module, name in (("multiarray", "_reconstruct"), ("multiarray", "scalar"),
                                              ("numeric", "_frombuffer"))}
_CIFAR_PICKLE_GLOBALS |= {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class DatasetError(UserError, RuntimeError):
    """The dataset is missing or not in the expected format."""


@dataclass
class ArrayData:
    """In-memory train and test arrays (MNIST, CIFAR-10, synthetic)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped for .gz; a file that cannot be read is a DatasetError."""
    if path.is_dir():
        raise DatasetError(f"{path} is a directory; expected a file")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (gzip.BadGzipFile, zlib.error) as e:
        raise DatasetError(f"{path} is not a valid gzip file ({e}); gunzip it or download it again") from None
    except EOFError:
        raise DatasetError(f"{path} is truncated (the gzip stream ends early); download it again") from None
    except OSError as e:
        raise DatasetError(f"cannot read {path}: {e.strerror or e}") from None


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (optionally .gz) as a uint8 array of at least one dimension."""
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DatasetError(f"{path} is not an unsigned-byte IDX file")
    ndim = raw[3]
    if ndim == 0:
        raise DatasetError(f"{path}: IDX header says 0 dimensions; expected images (3) or labels (1)")
    if len(raw) < 4 + 4 * ndim:
        raise DatasetError(f"{path}: IDX header says {ndim} dimensions but the file ends after "
                           f"{len(raw)} bytes, inside the header")
    dims = struct.unpack(">" + "I" * ndim, raw[4: 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != math.prod(dims):  # math.prod: exact for any header, no int64 overflow
        raise DatasetError(f"{path}: header says {dims} but holds {data.size} bytes")
    return data.reshape(dims)


def check_split(name: str, x: np.ndarray, y: np.ndarray, shape: Tuple[int, ...], classes: int,
                x_source: str, y_source: str) -> None:
    """Refuse a split whose images are not `shape`, whose label count differs from its image
    count, that is empty, or whose labels are outside 0..classes-1."""
    if x.ndim != len(shape) + 1 or x.shape[1:] != shape:
        raise DatasetError(f"{name}: {x_source} holds an array of shape {x.shape}, expected "
                           f"(N, {', '.join(map(str, shape))}): N images of {'x'.join(map(str, shape))}")
    if y.ndim != 1:
        raise DatasetError(f"{name}: {y_source} holds labels of shape {y.shape}, expected one label per image")
    if len(x) != len(y):
        raise DatasetError(f"{name}: {x_source} has {len(x)} images but {y_source} has {len(y)} labels")
    if len(x) == 0:
        raise DatasetError(f"{name}: {x_source} holds no images")
    bad = y[(y < 0) | (y >= classes)]
    if bad.size:
        raise DatasetError(f"{name}: {y_source} has label {int(bad[0])} ({bad.size} such), expected "
                           f"0..{classes - 1}")


def _find(data_dir: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (data_dir / name).exists():
            return data_dir / name
    raise DatasetError(f"MNIST: expected {stem}[.gz] in {data_dir} (the four IDX files of MNIST or "
                       f"Fashion-MNIST; Debian's dataset-fashion-mnist puts them in {FASHION_MNIST_DIR})")


def load_mnist(data_dir: Optional[str]) -> ArrayData:
    """MNIST-format IDX files from data_dir, or Keras' download when data_dir is None."""
    if data_dir is None:
        import tensorflow as tf
        try:
            (xt, yt), (xv, yv) = tf.keras.datasets.mnist.load_data()
        except Exception as e:  # no internet
            raise DatasetError(f"MNIST download failed ({e}); pass --data-dir with IDX files, e.g. "
                               f"{FASHION_MNIST_DIR}") from None
        sources = {k: f"Keras' MNIST {k}" for k in MNIST_FILES}
    else:
        d = Path(data_dir)
        if not d.is_dir():
            raise DatasetError(f"MNIST: data directory {d} does not exist")
        paths = {k: _find(d, stem) for k, stem in MNIST_FILES.items()}
        xt, yt, xv, yv = (read_idx(paths[k]) for k in ("train_x", "train_y", "test_x", "test_y"))
        sources = {k: str(p) for k, p in paths.items()}
    check_split("MNIST train set", xt, yt, (28, 28), CLASSES, sources["train_x"], sources["train_y"])
    check_split("MNIST test set", xv, yv, (28, 28), CLASSES, sources["test_x"], sources["test_y"])
    prep = lambda x: (x.astype(np.float32) / 255.0)[..., None]  # noqa: E731
    return ArrayData(prep(xt), yt.astype(np.int64), prep(xv), yv.astype(np.int64), CLASSES)


class _ArraysOnly(pickle.Unpickler):
    """An unpickler that rebuilds numpy arrays and refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _CIFAR_PICKLE_GLOBALS:
            raise pickle.UnpicklingError(f"it references {module}.{name}, which a CIFAR batch never does "
                                         "(only numpy arrays are loaded, since pickle can run code)")
        return super().find_class(module, name)


def _field(batch: dict, key: str) -> Any:
    """batch[key], whether the pickle's keys are bytes (the original files) or str."""
    for k in (key.encode(), key):
        if k in batch:
            return batch[k]
    raise KeyError(key)


def _fits_uint8(a: np.ndarray) -> bool:
    """Integers, all in 0..255 (pixels stored in a wider integer type)."""
    return a.dtype.kind in "iu" and (a.size == 0 or (0 <= a.min() and a.max() <= 255))


def read_cifar_batch(path: Path) -> Tuple[np.ndarray, np.ndarray]:
    """(images NHWC uint8, labels int64) from one CIFAR-10 python batch file."""
    if path.is_dir():
        raise DatasetError(f"CIFAR-10: {path} is a directory; expected a batch file")
    try:
        with open(path, "rb") as f:
            batch = _ArraysOnly(f, encoding="bytes").load()
    except OSError as e:
        raise DatasetError(f"CIFAR-10: cannot read {path}: {e.strerror or e}") from None
    except Exception as e:  # pickle raises many kinds for bytes that are not a pickle
        raise DatasetError(f"CIFAR-10: {path} is not a CIFAR python batch ({e})") from None
    if not isinstance(batch, dict):
        raise DatasetError(f"CIFAR-10: {path} is not a CIFAR python batch (it holds a "
                           f"{type(batch).__name__}, expected a dict with data and labels)")
    try:
        data, labels = np.asarray(_field(batch, "data")), np.asarray(_field(batch, "labels"))
    except KeyError as e:
        raise DatasetError(f"CIFAR-10: {path} is not a CIFAR python batch (no {e} entry)") from None
    row = math.prod(CIFAR_SHAPE)
    if data.ndim != 2 or data.shape[1] != row:
        raise DatasetError(f"CIFAR-10: {path} holds data of shape {data.shape}, expected (images, {row})")
    if data.dtype != np.uint8 and not _fits_uint8(data):
        raise DatasetError(f"CIFAR-10: {path} holds data of type {data.dtype} that is not bytes 0..255")
    if labels.dtype.kind not in "iu":
        raise DatasetError(f"CIFAR-10: {path} holds labels of type {labels.dtype}, expected integers")
    x = data.astype(np.uint8).reshape(-1, *CIFAR_SHAPE).transpose(0, 2, 3, 1)
    return x, labels.astype(np.int64)


def load_cifar10(data_dir: Optional[str]) -> ArrayData:
    """CIFAR-10 from a `cifar-10-batches-py` folder (or its parent), or Keras' download."""
    if data_dir is None:
        import tensorflow as tf
        try:
            (xt, yt), (xv, yv) = tf.keras.datasets.cifar10.load_data()
        except Exception as e:
            raise DatasetError(f"CIFAR-10 download failed ({e}); pass --data-dir with the "
                               "cifar-10-batches-py folder") from None
        yt, yv = yt.reshape(-1), yv.reshape(-1)
        check_split("CIFAR-10 train set", xt, yt, (32, 32, 3), CLASSES, "Keras' train images", "Keras' train labels")
        check_split("CIFAR-10 test set", xv, yv, (32, 32, 3), CLASSES, "Keras' test images", "Keras' test labels")
    else:
        d = Path(data_dir)
        if (d / "cifar-10-batches-py").is_dir():
            d = d / "cifar-10-batches-py"
        names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
        missing = [n for n in names if not (d / n).exists()]  # a directory there: read_cifar_batch says so
        if missing:
            raise DatasetError(f"CIFAR-10: expected {', '.join(missing)} in {d} (the python version, "
                               "cifar-10-batches-py)")
        parts = []
        for n in names:
            x, y = read_cifar_batch(d / n)
            split = "CIFAR-10 test set" if n == "test_batch" else "CIFAR-10 train set"
            check_split(split, x, y, (32, 32, 3), CLASSES, str(d / n), str(d / n))
            parts.append((x, y))
        xt = np.concatenate([p[0] for p in parts[:5]])
        yt = np.concatenate([p[1] for p in parts[:5]])
        xv, yv = parts[5]
    mean = np.array([0.4914, 0.4822, 0.4465], np.float32)
    std = np.array([0.2470, 0.2435, 0.2616], np.float32)
    prep = lambda x: (x.astype(np.float32) / 255.0 - mean) / std  # noqa: E731
    return ArrayData(prep(xt), yt.astype(np.int64), prep(xv), yv.astype(np.int64), CLASSES)


SYNTHETIC_POOL_BYTES = 64 << 20  # distinct random images at most; more are repeats of them


def synthetic(shape: tuple, classes: int, n_train: int, n_test: int, seed: int = 0) -> ArrayData:
    """Random images of the dataset's shape with random labels (throughput runs): n_train and
    n_test of them, each at most SYNTHETIC_POOL_BYTES (the trainers' epochs run on through
    passes over a smaller set, so a long epoch needs no more memory)."""
    rng = np.random.default_rng(seed)
    most = max(1, SYNTHETIC_POOL_BYTES // (4 * int(np.prod(shape))))
    n_train, n_test = min(n_train, most), min(n_test, most)
    mk = lambda n: rng.standard_normal((n, *shape), dtype=np.float32)  # noqa: E731
    return ArrayData(mk(n_train), rng.integers(0, classes, n_train), mk(n_test),
                     rng.integers(0, classes, n_test), classes)


IMAGENET_TRAIN_IMAGES = 1281167


def imagenet_datasets(data_dir: str, batch_size: int, rank: int, size: int,
                      image_size: int = IMAGENET_SIZE, tfrecord_classes: Optional[int] = None):
    """(train, val, classes, n_train) from ImageNet JPEG folders (train/<class>/*.JPEG,
    val/<class>/*.JPEG; preferred where both exist) or TFRecords (train-*, validation-*, with
    image/encoded and 1-based image/class/label, as Google's build_imagenet_data writes;
    tfrecord_classes labels, default IMAGENET_CLASSES; n_train counted from the records' headers
    unless the files are build_imagenet_data's 1024 train shards).

    train(seed) is this rank's endless stream of training batches for one epoch's seed (an
    int): order and flips are functions of the seed only, so a resumed run's epoch e sees the
    uninterrupted run's. val is a tf.data pipeline."""
    import tensorflow as tf

    d = Path(data_dir)
    if not d.is_dir():
        raise DatasetError(f"ImageNet: data directory {d} does not exist")
    folders = (d / "train").is_dir() and (d / "val").is_dir()
    train_records = [] if folders else sorted(p for p in d.glob("train-*") if p.is_file())
    if train_records:
        val_records = sorted(p for p in d.glob("validation-*") if p.is_file())
        if not val_records:
            raise DatasetError(f"ImageNet TFRecords: found train-* but no validation-* in {d}")
        classes = tfrecord_classes or IMAGENET_CLASSES
        n_train = IMAGENET_TRAIN_IMAGES if len(train_records) == IMAGENET_TRAIN_SHARDS else \
            sum(count_records(f) for f in train_records)
        count_records(val_records[0])
        _check_labels(train_records[0], classes)
        train = lambda seed: _tfrecord_pipeline(  # noqa: E731
            train_records, seed, batch_size, rank, size, image_size).repeat()
        return (train, _tfrecord_pipeline(val_records, None, batch_size, rank, size, image_size),
                classes, n_train)
    if tfrecord_classes is not None:
        raise DatasetError(f"--num-classes applies to ImageNet TFRecords; the class folders under {d / 'train'} "
                           "give the classes")
    if not folders:
        raise DatasetError(f"ImageNet: expected train/ and val/ folders of class folders of JPEGs, "
                           f"or TFRecord files train-* and validation-*, in {d}")
    class_names = sorted(p.name for p in (d / "train").iterdir() if p.is_dir())
    if not class_names:
        raise DatasetError(f"ImageNet: {d / 'train'} has no class folders")
    index = {c: i for i, c in enumerate(class_names)}
    val_names = sorted(p.name for p in (d / "val").iterdir() if p.is_dir())
    unknown = sorted(set(val_names) - set(index))
    if unknown:
        raise DatasetError(f"ImageNet: {d / 'val'} has class folders that {d / 'train'} lacks: "
                           f"{', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}; their images could "
                           "not be scored")

    def files(split: str):
        paths, labels = [], []
        for c in class_names:
            for p in sorted((d / split / c).glob("*")):
                if p.suffix.lower() in (".jpeg", ".jpg"):
                    paths.append(str(p))
                    labels.append(index[c])
        if not paths:
            flat = any(p.suffix.lower() in (".jpeg", ".jpg") for p in (d / split).glob("*"))
            raise DatasetError(f"ImageNet: no JPEG files in the class folders under {d / split}"
                               + (" (its JPEGs lie directly in it: sort them into class folders, "
                                  "as train/ is)" if flat else ""))
        return paths, labels

    (train_paths, train_labels), val_files = files("train"), files("val")
    # this rank's shard, as Dataset.shard(size, rank) takes it
    paths, labels = tf.constant(train_paths[rank::size]), tf.constant(train_labels[rank::size], tf.int64)
    n = int(paths.shape[0])

    def train(seed):
        # flips from [seed, element], as the order's permutations from [seed, -1 - pass]
        seed = tf.cast(seed, tf.int64)
        return shuffled_passes(n, seed).enumerate().map(
            lambda k, i: (_preprocess(tf.io.read_file(tf.gather(paths, i)), image_size, tf.stack([seed, k])),
                          tf.gather(labels, i)),
            num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size, drop_remainder=True)

    val = (tf.data.Dataset.from_tensor_slices(val_files).shard(size, rank)
           .map(lambda p, y: (_preprocess(tf.io.read_file(p), image_size), y), num_parallel_calls=tf.data.AUTOTUNE)
           .batch(batch_size).prefetch(tf.data.AUTOTUNE))
    return train, val, len(class_names), len(train_paths)


def count_records(path: Path) -> int:
    """The records of a TFRecord file, from their length headers alone (the data is skipped);
    refused where the file is not TFRecords (a header past the end, a truncated record)."""
    size, n, at = path.stat().st_size, 0, 0
    with open(path, "rb") as f:
        while at < size:
            header = f.read(12)
            length = struct.unpack("<Q", header[:8])[0] if len(header) == 12 else size
            at += 12 + length + 4
            if at > size:
                raise DatasetError(f"ImageNet: {path} is not a TFRecord file (or is truncated): record {n} "
                                   "runs past its end")
            f.seek(at)
            n += 1
    if n == 0:
        raise DatasetError(f"ImageNet: {path} holds no records")
    return n


def _check_labels(path: Path, classes: int, first: int = 64) -> None:
    """The first records' labels lie in 1..classes (1-based, as build_imagenet_data writes)."""
    import tensorflow as tf

    try:
        labels = [int(y) + 1 for _, y in tf.data.TFRecordDataset(str(path)).take(first).map(_parse_record)]
    except tf.errors.OpError as e:
        raise DatasetError(f"ImageNet: cannot read the records of {path}: {e.message.splitlines()[0]}") from None
    bad = sorted({y for y in labels if not 1 <= y <= classes})
    if bad:
        raise DatasetError(f"ImageNet: {path} holds labels {bad[:5]} outside 1..{classes} (1-based "
                           "image/class/label); give --num-classes, or check the files")


def shuffled_passes(n: int, seed):
    """Indices 0..n-1, pass after pass without end, each pass a permutation drawn statelessly
    from [seed, -1 - pass] (seed: an int64 scalar tensor), so a pipeline built at any epoch
    replays that epoch's order."""
    import tensorflow as tf

    return tf.data.Dataset.counter().flat_map(lambda p: tf.data.Dataset.from_tensor_slices(
        tf.random.experimental.stateless_shuffle(tf.range(n, dtype=tf.int64), tf.stack([seed, -1 - p]))))


def _preprocess(jpeg, image_size: int, flip_seed=None):
    """Decoded, resized to image_size, scaled to [-1, 1]; flipped (training) as flip_seed says."""
    import tensorflow as tf

    img = tf.io.decode_jpeg(jpeg, channels=3)
    img = tf.image.resize(img, (image_size, image_size))
    if flip_seed is not None:
        img = tf.image.stateless_random_flip_left_right(img, flip_seed)
    return (img / 127.5) - 1.0


def _parse_record(record):
    import tensorflow as tf

    feats = tf.io.parse_single_example(record, {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
    return feats["image/encoded"], feats["image/class/label"] - 1  # labels are 1-based


def _tfrecord_pipeline(files, seed, batch_size, rank, size, image_size):
    """One pass over the records; training when `seed` is given: files and records shuffled
    and images flipped, all from the seed (records stream, so a 10,000-record buffer shuffles)."""
    import tensorflow as tf

    training = seed is not None
    ds = tf.data.Dataset.from_tensor_slices([str(f) for f in files])
    if len(files) >= size:  # shard whole files; with fewer files than ranks, shard records
        ds = ds.shard(size, rank)
        if training:
            ds = ds.shuffle(len(files), seed=int(seed))
        ds = ds.interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        ds = tf.data.TFRecordDataset(ds).shard(size, rank)
    ds = ds.map(lambda r: _parse_record(r), num_parallel_calls=tf.data.AUTOTUNE)
    if not training:
        ds = ds.map(lambda jpeg, y: (_preprocess(jpeg, image_size), y), num_parallel_calls=tf.data.AUTOTUNE)
        return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    ds = ds.shuffle(10000, seed=int(seed)).enumerate()
    flip = tf.constant(int(seed), tf.int64)
    ds = ds.map(lambda k, r: (_preprocess(r[0], image_size, tf.stack([flip, k])), r[1]),
                num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size, drop_remainder=True)
