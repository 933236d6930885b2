"""Models: a CNN for MNIST, ResNet-20 for CIFAR-10, ResNet-50 for ImageNet, a wide MLP (the
communication-bound kind Dettmers measured); and the fully connected layers that the
model-parallel example splits across ranks."""
from __future__ import annotations

import tensorflow as tf

L = tf.keras.layers


def mnist_cnn(classes: int = 10) -> tf.keras.Model:
    """Two small convolutions and two dense layers (about 0.1M parameters): quick on CPUs."""
    return tf.keras.Sequential([
        L.Input((28, 28, 1)),
        L.Conv2D(16, 3, activation="relu"),
        L.MaxPooling2D(),
        L.Conv2D(32, 3, activation="relu"),
        L.MaxPooling2D(),
        L.Flatten(),
        L.Dense(128, activation="relu"),
        L.Dropout(0.25),
        L.Dense(classes),
    ], name="mnist_cnn")


def _resnet_block(x, filters: int, stride: int):
    shortcut = x
    y = L.Conv2D(filters, 3, stride, padding="same", use_bias=False,
                 kernel_initializer="he_normal")(x)
    y = L.BatchNormalization()(y)
    y = L.ReLU()(y)
    y = L.Conv2D(filters, 3, padding="same", use_bias=False, kernel_initializer="he_normal")(y)
    y = L.BatchNormalization()(y)
    if stride != 1 or shortcut.shape[-1] != filters:
        shortcut = L.Conv2D(filters, 1, stride, use_bias=False, kernel_initializer="he_normal")(shortcut)
        shortcut = L.BatchNormalization()(shortcut)
    return L.ReLU()(L.Add()([y, shortcut]))


def resnet20(classes: int = 10, input_shape=(32, 32, 3)) -> tf.keras.Model:
    """He et al.'s CIFAR ResNet with 3 stages of 3 basic blocks (about 0.27M parameters)."""
    inputs = L.Input(input_shape)
    x = L.Conv2D(16, 3, padding="same", use_bias=False, kernel_initializer="he_normal")(inputs)
    x = L.ReLU()(L.BatchNormalization()(x))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            x = _resnet_block(x, filters, 2 if stage > 0 and block == 0 else 1)
    x = L.GlobalAveragePooling2D()(x)
    return tf.keras.Model(inputs, L.Dense(classes)(x), name="resnet20")


def resnet50(classes: int = 1000, input_shape=(224, 224, 3)) -> tf.keras.Model:
    """Keras' ResNet-50, randomly initialised, logits out."""
    return tf.keras.applications.ResNet50(weights=None, input_shape=input_shape, classes=classes,
                                          classifier_activation=None)


def mlp(classes: int = 10, input_shape=(28, 28, 1), width: int = 4096, depth: int = 2) -> tf.keras.Model:
    """`depth` fully connected ReLU layers of `width` units (784-4096-4096-10 is 20M
    parameters): little compute per byte of gradient, so the network bounds the step."""
    layers = [L.Input(input_shape), L.Flatten()]
    layers += [L.Dense(width, activation="relu") for _ in range(depth)]
    return tf.keras.Sequential(layers + [L.Dense(classes)], name="mlp")


MODELS = {"mnist": mnist_cnn, "cifar10": resnet20, "imagenet": resnet50}
