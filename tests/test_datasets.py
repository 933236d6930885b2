"""Dataset loaders on small files in the real formats, and their error messages."""
from __future__ import annotations

import numpy as np
import pytest

import datagen
from horovod_q8.workloads import datasets as D


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_idx(tmp_path, gz):
    data = D.load_mnist(str(datagen.mnist(tmp_path, gz=gz)))
    assert data.x_train.shape == (512, 28, 28, 1) and data.x_test.shape == (128, 28, 28, 1)
    assert data.x_train.dtype == np.float32 and 0 <= data.x_train.min() and data.x_train.max() <= 1
    assert set(np.unique(data.y_train)) <= set(range(10))


def test_mnist_errors(tmp_path):
    with pytest.raises(D.DatasetError, match="does not exist"):
        D.load_mnist(str(tmp_path / "nope"))
    with pytest.raises(D.DatasetError, match="expected train-images-idx3-ubyte"):
        D.load_mnist(str(tmp_path))
    datagen.mnist(tmp_path, gz=False)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\x01\x02\x03\x04garbage")
    with pytest.raises(D.DatasetError, match="not an unsigned-byte IDX file"):
        D.load_mnist(str(tmp_path))


def test_cifar10_batches(tmp_path):
    data = D.load_cifar10(str(datagen.cifar10(tmp_path)))
    assert data.x_train.shape == (5 * 64, 32, 32, 3) and data.x_test.shape == (64, 32, 32, 3)
    data2 = D.load_cifar10(str(tmp_path / "cifar-10-batches-py"))
    np.testing.assert_array_equal(data.y_train, data2.y_train)


def test_cifar10_errors(tmp_path):
    with pytest.raises(D.DatasetError, match="data_batch_1.*cifar-10-batches-py"):
        D.load_cifar10(str(tmp_path))
    datagen.cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(D.DatasetError, match="not a CIFAR python batch"):
        D.load_cifar10(str(tmp_path))


@pytest.mark.parametrize("kind", ["folders", "tfrecords"])
def test_imagenet(tmp_path, kind):
    pytest.importorskip("tensorflow")
    if kind == "folders":
        datagen.imagenet_folders(tmp_path)
    else:
        datagen.imagenet_tfrecords(tmp_path)
    train, val, classes, n = D.imagenet_datasets(str(tmp_path), 4, 0, 1, image_size=32,
                                                 tfrecord_classes=2 if kind == "tfrecords" else None)
    x, y = next(iter(train(0)))
    assert x.shape == (4, 32, 32, 3) and classes == 2 and n == 48  # counted, not ImageNet's 1,281,167
    assert int(max(y)) < 2 and sum(int(b[0].shape[0]) for b in val) == 48

    def first(seed, k=15):  # more batches than one pass (48 images): passes continue
        return [(x.numpy(), y.numpy()) for x, y in train(seed).take(k)]

    a, b, other = first(5), first(5), first(6)
    assert all(np.array_equal(p[0], q[0]) and np.array_equal(p[1], q[1]) for p, q in zip(a, b))
    assert not all(np.array_equal(p[0], q[0]) for p, q in zip(a, other))


def test_imagenet_errors(tmp_path):
    pytest.importorskip("tensorflow")
    with pytest.raises(D.DatasetError, match="expected train/ and val/"):
        D.imagenet_datasets(str(tmp_path), 4, 0, 1)
    (tmp_path / "train-00000").write_bytes(b"")
    with pytest.raises(D.DatasetError, match="no validation-"):
        D.imagenet_datasets(str(tmp_path), 4, 0, 1)


def test_imagenet_refusals_before_training(tmp_path):
    """What used to fail in the middle of training, or train on the wrong numbers, is refused
    when the data is opened: labels outside --num-classes, files named train-* that are not
    TFRecords, validation classes that training lacks, a flat val/, --num-classes on folders."""
    pytest.importorskip("tensorflow")
    records = datagen.imagenet_tfrecords(tmp_path / "records", classes=3)
    with pytest.raises(D.DatasetError, match=r"labels \[3\] outside 1..2"):
        D.imagenet_datasets(str(records), 4, 0, 1, image_size=32, tfrecord_classes=2)
    assert D.count_records(records / "train-00000-of-00001") == 48
    (records / "train-00000-of-00001").write_bytes((records / "train-00000-of-00001").read_bytes()[:-10])
    with pytest.raises(D.DatasetError, match="not a TFRecord file .* record 47 runs past its end"):
        D.imagenet_datasets(str(records), 4, 0, 1, image_size=32, tfrecord_classes=3)
    folders = datagen.imagenet_folders(tmp_path / "folders")
    (folders / "train-labels.txt").write_text("not a record\n")  # folders win over a stray train-*
    assert D.imagenet_datasets(str(folders), 4, 0, 1, image_size=32)[2] == 2
    with pytest.raises(D.DatasetError, match="--num-classes applies to ImageNet TFRecords"):
        D.imagenet_datasets(str(folders), 4, 0, 1, image_size=32, tfrecord_classes=2)
    (folders / "val" / "n99999999").mkdir()
    with pytest.raises(D.DatasetError, match="val has class folders that .*train lacks: n99999999"):
        D.imagenet_datasets(str(folders), 4, 0, 1, image_size=32)
    (folders / "val" / "n99999999").rmdir()
    for c in list((folders / "val").iterdir()):
        for f in c.iterdir():
            f.rename(folders / "val" / f"{c.name}_{f.name}")
        c.rmdir()
    with pytest.raises(D.DatasetError, match="JPEGs lie directly in it: sort them into class folders"):
        D.imagenet_datasets(str(folders), 4, 0, 1, image_size=32)


def test_synthetic_data_is_bounded():
    x = D.synthetic((224, 224, 3), 1000, 100000, 128).x_train
    assert x.dtype == np.float32 and x.nbytes <= D.SYNTHETIC_POOL_BYTES
