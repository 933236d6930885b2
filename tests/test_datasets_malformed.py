"""Malformed datasets (issue 15): each gives a DatasetError that names the file and the
split, when loading, never a raw struct/gzip/EOF/type error or a failure after an epoch."""
from __future__ import annotations

import gzip
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

import datagen
from horovod_q8.workloads import datasets as D

TRAIN_X, TRAIN_Y = "train-images-idx3-ubyte", "train-labels-idx1-ubyte"
TEST_X, TEST_Y = "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"


def idx(array: np.ndarray) -> bytes:
    """The IDX bytes of array (what datagen.write_idx writes)."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    return header + array.astype(np.uint8).tobytes()


def make_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()


def writes(data: bytes):
    return lambda path: path.write_bytes(data)


PLAIN_IDX = idx(np.zeros((4, 28, 28), np.uint8))
# case: (file, gzipped files?, how to spoil it, what the message says besides the file's name)
MNIST_CASES = {
    "header_only": (TRAIN_X, False, writes(b"\x00\x00\x08\x03"), "ends after 4 bytes, inside the header"),
    "not_gzip": (TRAIN_X, True, writes(PLAIN_IDX), "is not a valid gzip file"),
    "truncated_gzip": (TEST_Y, True, writes(gzip.compress(PLAIN_IDX)[:40]), "is truncated"),
    "zero_dimensions": (TRAIN_Y, False, writes(b"\x00\x00\x08\x00\x07"), "0 dimensions"),
    "directory": (TRAIN_Y, True, make_dir, "is a directory; expected a file"),
    "test_label_count": (TEST_Y, False, writes(idx(np.zeros(100, np.uint8))),
                         f"MNIST test set: .*{TEST_X} has 128 images but .*{TEST_Y} has 100 labels"),
    "test_image_shape": (TEST_X, False, writes(idx(np.zeros((128, 32, 32), np.uint8))),
                         r"MNIST test set: .* holds an array of shape \(128, 32, 32\), expected \(N, 28, 28\)"),
    "flat_images": (TRAIN_X, False, writes(idx(np.zeros(512 * 784, np.uint8))),
                    r"MNIST train set: .* holds an array of shape \(401408,\), expected \(N, 28, 28\): N images"),
    "label_out_of_range": (TRAIN_Y, False, writes(idx(np.full(512, 10, np.uint8))),
                           r"MNIST train set: .* has label 10 \(512 such\), expected 0..9"),
    "label_matrix": (TEST_Y, False, writes(idx(np.zeros((128, 2), np.uint8))),
                     r"MNIST test set: .* holds labels of shape \(128, 2\)"),
}


@pytest.mark.parametrize("case", sorted(MNIST_CASES))
def test_malformed_mnist_names_the_file(tmp_path, case):
    name, gz, spoil, message = MNIST_CASES[case]
    datagen.mnist(tmp_path, gz=gz)
    path = tmp_path / (name + (".gz" if gz else ""))
    spoil(path)
    with pytest.raises(D.DatasetError, match=message) as e:
        D.load_mnist(str(tmp_path))
    assert str(path) in str(e.value)
    if case == "test_label_count":
        assert "train" not in str(e.value).replace(str(tmp_path), "")


def test_empty_mnist_is_refused(tmp_path):
    datagen.mnist(tmp_path, gz=False)
    (tmp_path / TRAIN_X).write_bytes(idx(np.zeros((0, 28, 28), np.uint8)))
    (tmp_path / TRAIN_Y).write_bytes(idx(np.zeros(0, np.uint8)))
    with pytest.raises(D.DatasetError, match=f"MNIST train set: .*{TRAIN_X} holds no images"):
        D.load_mnist(str(tmp_path))


def test_huge_idx_header_is_a_size_mismatch(tmp_path):
    """4 dimensions of 2**16: 2**64 elements, which wraps to 0 in int64 (np.prod) and would
    match an empty body."""
    path = tmp_path / "x"
    path.write_bytes(bytes([0, 0, 8, 4]) + (2 ** 16).to_bytes(4, "big") * 4)
    with pytest.raises(D.DatasetError, match=re.escape(f"{path}: header says") + ".* but holds 0 bytes"):
        D.read_idx(path)


def test_real_fashion_mnist_still_loads():
    if not Path(D.FASHION_MNIST_DIR, TRAIN_X + ".gz").exists():
        pytest.skip("Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)")
    data = D.load_mnist(D.FASHION_MNIST_DIR)
    assert data.x_train.shape == (60000, 28, 28, 1) and data.x_test.shape == (10000, 28, 28, 1)


class _RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _batch(n=64, **fields):
    x, y = datagen.images(n, (32, 32, 3), 10)
    batch = {b"data": x.transpose(0, 3, 1, 2).reshape(n, -1), b"labels": list(map(int, y))}
    batch.update({k.encode(): v for k, v in fields.items()})
    return batch


CIFAR_CASES = {
    "directory": ("data_batch_3", None, "is a directory; expected a batch file"),
    "truncated": ("data_batch_2", "truncate", "is not a CIFAR python batch"),
    "a_list": ("data_batch_1", [1, 2, 3], "is not a CIFAR python batch \\(it holds a list"),
    "no_labels": ("data_batch_4", {b"data": _batch()[b"data"]}, "no 'labels' entry"),
    "row_size": ("data_batch_5", _batch(data=np.zeros((64, 3000), np.uint8)),
                 r"holds data of shape \(64, 3000\), expected \(images, 3072\)"),
    "float_data": ("data_batch_1", _batch(data=np.full((64, 3072), 0.5)), "not bytes 0..255"),
    "wide_ints": ("data_batch_1", _batch(data=np.full((64, 3072), 300, np.int64)), "not bytes 0..255"),
    "test_label_count": ("test_batch", _batch(labels=[0] * 60),
                         "CIFAR-10 test set: .*test_batch has 64 images but .*test_batch has 60 labels"),
    "label_out_of_range": ("data_batch_2", _batch(labels=[-1] * 64),
                           "CIFAR-10 train set: .*data_batch_2 has label -1 \\(64 such\\), expected 0..9"),
    "float_labels": ("data_batch_2", _batch(labels=[0.5] * 64), "labels of type float64, expected integers"),
}


@pytest.mark.parametrize("case", sorted(CIFAR_CASES))
def test_malformed_cifar10_names_the_file(tmp_path, case):
    name, content, message = CIFAR_CASES[case]
    datagen.cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / name
    if case == "directory":
        path.unlink()
        path.mkdir()
    elif case == "truncated":
        path.write_bytes(path.read_bytes()[:1000])
    else:
        path.write_bytes(pickle.dumps(content))
    with pytest.raises(D.DatasetError, match=message) as e:
        D.load_cifar10(str(tmp_path))
    assert str(path) in str(e.value)


def test_cifar10_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    datagen.cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    path.write_bytes(pickle.dumps(_RunsCode(marker)))
    with pytest.raises(D.DatasetError, match=r"references (posix|os)\.system, which a CIFAR batch never does"):
        D.load_cifar10(str(tmp_path))
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_cifar10_loads_every_pickle_protocol(tmp_path, protocol):
    data = D.load_cifar10(str(datagen.cifar10(tmp_path, protocol=protocol)))
    assert data.x_train.shape == (5 * 64, 32, 32, 3) and data.y_test.shape == (64,)


def test_cifar10_wider_int_pixels_and_str_keys_load(tmp_path):
    datagen.cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    batch = _batch()
    path.write_bytes(pickle.dumps({"data": batch[b"data"].astype(np.int64), "labels": batch[b"labels"]}))
    data = D.load_cifar10(str(tmp_path))
    reference = D.load_cifar10(str(datagen.cifar10(tmp_path / "ref")))
    np.testing.assert_array_equal(data.x_train[:64], reference.x_train[:64])
