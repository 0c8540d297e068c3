"""The model and the data: a small CNN on Fashion-MNIST, one IID shard per node.

Fashion-MNIST is read from the local copy that `bash build_deps/dev.sh setup`
gets (the Debian package dataset-fashion-mnist, or Keras's download); nothing
is downloaded at run time.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's start-up lines

import keras  # noqa: E402
import numpy as np  # noqa: E402
from deepreduce_bench.data import load_fashion_mnist  # noqa: E402


# The initial model's seed: the server and every node build the same initial
# weights (deepreduce_tf.federated.keras_initial_weights(load_model, MODEL_SEED)),
# so the server never needs to send a node the whole model.
MODEL_SEED = 0


def load_model(learning_rate=0.05):
    """The model every node and the server build (Keras 3)."""
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(16, 3, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Flatten(), keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def _images(dataset):
    return dataset.images[..., None].astype(np.float32) / 255.0, dataset.labels.astype(np.int64)


_TRAIN = None


def load_data(partition_id, num_partitions, examples=0):
    """Node `partition_id`'s shard of the training split (one fixed shuffle,
    num_partitions equal parts), 80 % to train and 20 % to evaluate on; with
    `examples` > 0, only the shard's first `examples` images (a quick run)."""
    global _TRAIN
    if _TRAIN is None:
        _TRAIN = _images(load_fashion_mnist("train", allow_synthetic=False))
    x, y = _TRAIN
    order = np.random.default_rng(1234).permutation(len(y))
    shard = np.array_split(order, num_partitions)[partition_id]
    if examples > 0:
        shard = shard[:examples]
    cut = int(0.8 * len(shard))
    return x[shard[:cut]], y[shard[:cut]], x[shard[cut:]], y[shard[cut:]]


def load_test_data():
    """The test split (10,000 images): the server's evaluation of its model."""
    return _images(load_fashion_mnist("test", allow_synthetic=False))
