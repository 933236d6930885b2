"""Gradient tensor sizes of a model, in forward order: Keras models, AlexNet by hand, files."""
from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass

# Krizhevsky's "one weird trick" AlexNet (also torchvision's): (name, weight elements, bias).
_ALEXNET = [("conv1", 64 * 3 * 11 * 11, 64), ("conv2", 192 * 64 * 5 * 5, 192),
            ("conv3", 384 * 192 * 3 * 3, 384), ("conv4", 256 * 384 * 3 * 3, 256),
            ("conv5", 256 * 256 * 3 * 3, 256), ("fc6", 4096 * 256 * 6 * 6, 4096),
            ("fc7", 4096 * 4096, 4096), ("fc8", 1000 * 4096, 1000)]

KERAS_APPS = {"resnet50": "ResNet50", "resnet101": "ResNet101", "resnet152": "ResNet152",
              "inception_v3": "InceptionV3", "vgg16": "VGG16", "vgg19": "VGG19",
              "densenet121": "DenseNet121", "mobilenet_v2": "MobileNetV2"}
OURS = ("mnist", "cifar10", "imagenet")  # horovod_q8.workloads.models.MODELS
NAMES = ("alexnet", *KERAS_APPS, *OURS)


@dataclass(frozen=True)
class ModelSpec:
    """Element counts of every gradient tensor, in forward (layer) order."""

    name: str
    sizes: tuple
    source: str

    @property
    def params(self) -> int:
        return sum(self.sizes)


def alexnet() -> ModelSpec:
    sizes = [n for _, w, b in _ALEXNET for n in (w, b)]
    return ModelSpec("alexnet", tuple(sizes), "hand-written (one-weird-trick AlexNet, 5 conv + 3 fc)")


CACHE = os.path.join(os.path.expanduser("~"), ".cache", "horovod_q8", "speedup_models")


def keras(name: str) -> ModelSpec:
    """Trainable variable sizes of a Keras application or one of our workload models; built with
    TensorFlow once, then read from CACHE (building one takes seconds)."""
    path = os.path.join(CACHE, f"{name}.json")
    if os.path.exists(path):
        with open(path) as f:
            d = json.load(f)
        return ModelSpec(name, tuple(d["sizes"]), d["source"])
    spec = _build_keras(name)
    os.makedirs(CACHE, exist_ok=True)
    with open(path, "w") as f:
        json.dump({"sizes": list(spec.sizes), "source": spec.source}, f)
    return spec


def _build_keras(name: str) -> ModelSpec:
    import numpy as np
    import tensorflow as tf
    if name in OURS:
        from horovod_q8.workloads.models import MODELS
        model, source = MODELS[name](), f"horovod_q8.workloads.models ({name})"
    else:
        model = getattr(tf.keras.applications, KERAS_APPS[name])(weights=None)
        source = f"tf.keras.applications.{KERAS_APPS[name]}"
    sizes = tuple(int(np.prod(v.shape)) for v in model.trainable_weights)
    tf.keras.backend.clear_session()
    return ModelSpec(name, sizes, source)


def from_file(path: str) -> ModelSpec:
    """JSON: a list of counts, of {"params": n} objects, or {name: count}; CSV: name,params rows
    (or one column of counts; a header row is skipped)."""
    name = os.path.splitext(os.path.basename(path))[0]
    if path.endswith(".json"):
        with open(path) as f:
            data = json.load(f)
        items = list(data.values()) if isinstance(data, dict) else data
        sizes = [int(x["params"]) if isinstance(x, dict) else int(x) for x in items]
    else:
        sizes = []
        with open(path, newline="") as f:
            for row in csv.reader(f):
                if not row or not row[-1].strip():
                    continue
                try:
                    sizes.append(int(float(row[-1])))
                except ValueError:
                    continue  # header
    if not sizes or min(sizes) < 0:
        raise ValueError(f"{path}: no non-negative parameter counts found")
    return ModelSpec(name, tuple(sizes), path)


def load(spec: str) -> ModelSpec:
    """A model by name (see NAMES) or a .json / .csv file of per-layer counts."""
    if os.path.exists(spec) or spec.endswith((".json", ".csv")):
        return from_file(spec)
    if spec == "alexnet":
        return alexnet()
    if spec in KERAS_APPS or spec in OURS:
        return keras(spec)
    raise ValueError(f"unknown model {spec!r}; known: {', '.join(NAMES)}, or a .json/.csv file")


def single(params: int) -> ModelSpec:
    return ModelSpec(f"{params} params", (int(params),), "--params")
