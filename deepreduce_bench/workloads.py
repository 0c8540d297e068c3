"""What deepreduce-bench trains: model + data + loss + metric, per --model.

    workload = make_workload(config)          # loads the data (numpy)
    model = workload.build_model()            # inside strategy.scope()
    ds = workload.train_dataset(input_context, global_batch)   # per input pipeline
    loss, correct = workload.loss(labels, outputs), workload.correct(labels, outputs)
    workload.evaluate(model)                  # {"accuracy": ...} or {"hit_rate": ...}

Image models (resnet20, resnet50) train on Fashion-MNIST or on the synthetic
class-template images of deepreduce_bench.data (learnable, same shapes), 10
classes, at --image_size (28x28 grey -> padded to image_size x image_size x 3
by data.to_resnet_input(), upsampled by an integer factor first for large
sizes). Images stay uint8 in memory and are converted per batch.

ncf trains NeuMF on MovieLens-100K or on movielens.synthetic_interactions(),
with the leave-one-out split and 4 negatives per positive, freshly drawn for
each epoch; evaluation is HR@10 / NDCG@10 over every user's 100 candidates.
"""
import math

import numpy as np
import tensorflow as tf

from deepreduce_bench import data as data_lib
from deepreduce_bench import models, movielens

NUM_CLASSES = data_lib.NUM_CLASSES
SYNTHETIC_TRAIN_IMAGES = data_lib.SYNTHETIC_TRAIN_IMAGES
SYNTHETIC_TEST_IMAGES = 2000
EVAL_CACHE_BYTES = 256 * 2 ** 20  # converted test images kept between evaluations


def _upsample_and_pad(images, size):
    """uint8 [N, 28, 28] -> float32 [N, size, size, 3] (integer upsampling, then padding)."""
    images = np.asarray(images)
    factor = size // images.shape[1]
    if factor > 1:
        images = images.repeat(factor, axis=1).repeat(factor, axis=2)
    return data_lib.to_resnet_input(images, size=size, channels=3)


class ImageWorkload:
    """ResNet-20 / ResNet-50 classification of 28x28 grey images at image_size."""

    metric = "accuracy"

    def __init__(self, config):
        self.config = config
        self.size = config.image_size
        self._eval_cache = None
        if config.data_name == "fashion_mnist":
            train = data_lib.load_fashion_mnist("train", config.data_dir, allow_synthetic=False)
            limit = config.num_eval_examples or None
            test = data_lib.load_fashion_mnist("test", config.data_dir, limit=limit,
                                               allow_synthetic=False)
            self.source = train.source
            self.train_images, self.train_labels = train.images, train.labels
            self.test_images, self.test_labels = test.images, test.labels
        else:
            self.source = "synthetic"
            self.train_images, self.train_labels = data_lib.synthetic_fashion_mnist(
                SYNTHETIC_TRAIN_IMAGES, seed=config.seed)
            n_test = min(config.num_eval_examples or SYNTHETIC_TEST_IMAGES, SYNTHETIC_TEST_IMAGES)
            self.test_images, self.test_labels = data_lib.synthetic_fashion_mnist(
                n_test, seed=config.seed + 1)
        self.num_train_examples = int(self.train_labels.shape[0])

    def build_model(self):
        shape = (self.size, self.size, 3)
        wd = self.config.weight_decay
        if self.config.model == "resnet20":
            return models.resnet20(shape, NUM_CLASSES, weight_decay=wd)
        return models.resnet50(shape, NUM_CLASSES, weight_decay=wd)

    def _convert(self, images, labels):
        """_upsample_and_pad() of a batch in TensorFlow ops (the same float32
        arithmetic). Not a tf.numpy_function: one in tf.data's threads made
        deleting the iterator after training stall for tens of seconds."""
        rows, cols = int(images.shape[1]), int(images.shape[2])
        factor = self.size // rows
        x = tf.cast(images, tf.float32)
        if factor > 1:
            x = tf.repeat(tf.repeat(x, factor, axis=1), factor, axis=2)
        pad_r, pad_c = self.size - rows * factor, self.size - cols * factor
        x = tf.pad(x, [[0, 0], [pad_r // 2, pad_r - pad_r // 2],
                       [pad_c // 2, pad_c - pad_c // 2]])
        x = (x / 255.0 - data_lib.PIXEL_MEAN) / data_lib.PIXEL_STD
        return tf.tile(x[..., None], [1, 1, 1, 3]), tf.cast(labels, tf.int32)

    def train_dataset(self, input_context, global_batch, total_steps=None):
        """The training batches of one input pipeline: (images, labels), repeated."""
        del total_steps  # the images repeat with a fresh shuffle each pass
        per_replica = input_context.get_per_replica_batch_size(global_batch)
        ds = tf.data.Dataset.from_tensor_slices((self.train_images, self.train_labels))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        ds = ds.shuffle(min(self.num_train_examples, 10000), seed=self.config.seed,
                        reshuffle_each_iteration=True).repeat()
        ds = ds.batch(per_replica, drop_remainder=True).map(self._convert)
        return ds.prefetch(2)

    def _eval_batches(self, batch_size):
        """[(float32 images, labels)] of the test split, cached when small."""
        if self._eval_cache is not None and self._eval_cache[0] == batch_size:
            return self._eval_cache[1]
        n = int(self.test_labels.shape[0])
        batches = ((tf.constant(_upsample_and_pad(self.test_images[s:s + batch_size],
                                                  self.size)),
                    self.test_labels[s:s + batch_size]) for s in range(0, n, batch_size))
        if n * self.size * self.size * 3 * 4 > EVAL_CACHE_BYTES:
            return batches
        self._eval_cache = (batch_size, list(batches))
        return self._eval_cache[1]

    @staticmethod
    def loss(labels, logits):
        return tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)

    @staticmethod
    def correct(labels, logits):
        return tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)

    def evaluate(self, model, batch_size=250):
        """Top-1 accuracy on the test images: {"accuracy", "eval_examples"}.

        The traced prediction function is kept, and so are the converted
        images when they take at most EVAL_CACHE_BYTES, so evaluating the same
        model again during training (--eval_every) costs no retracing.
        """
        if getattr(self, "_eval_model", None) is not model:
            self._eval_model = model
            self._predict = tf.function(lambda x: tf.argmax(model(x, training=False), -1,
                                                            output_type=tf.int32))
        hits = 0
        n = int(self.test_labels.shape[0])
        for x, y in self._eval_batches(batch_size):
            hits += int(np.sum(self._predict(x).numpy() == y))
        return {"accuracy": hits / max(n, 1), "eval_examples": n,
                "eval_split": "test" if self.source != "synthetic" else "synthetic test"}


class NCFWorkload:
    """NeuMF on implicit feedback with sampled negatives (He et al. 2017)."""

    metric = "hit_rate"
    num_neg = 4

    def __init__(self, config):
        self.config = config
        if config.data_name == "movielens":
            self.data = movielens.load_ncf(config.data_dir, num_neg=self.num_neg,
                                           seed=config.seed, allow_synthetic=False)
        else:
            inter = movielens.synthetic_interactions(seed=config.seed)
            self.data = movielens.leave_one_out(inter, num_neg=self.num_neg, seed=config.seed)
        self.source = self.data.source
        self.num_train_examples = int(self.data.train[0].shape[0])

    def build_model(self):
        return models.neumf(self.data.num_users, self.data.num_items,
                            l2=self.config.weight_decay)

    def _examples(self, count):
        """At least `count` shuffled training examples: epoch 1, then fresh negatives."""
        rng = np.random.default_rng(self.config.seed + 1)
        epochs = max(1, math.ceil(count / self.num_train_examples))
        parts = [self.data.train]
        for _ in range(epochs - 1):
            parts.append(movielens.sample_training_examples(self.data, self.num_neg, rng))
        out = [[], [], []]
        for users, items, labels in parts:
            perm = rng.permutation(users.shape[0])
            for o, a in zip(out, (users, items, labels)):
                o.append(a[perm])
        return tuple(np.concatenate(o) for o in out)

    def train_dataset(self, input_context, global_batch, total_steps=None):
        """((users, items), labels) batches of one input pipeline, repeated."""
        per_replica = input_context.get_per_replica_batch_size(global_batch)
        steps = total_steps or 1
        users, items, labels = self._examples(steps * global_batch)
        ds = tf.data.Dataset.from_tensor_slices(((users, items), labels))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.repeat().batch(per_replica, drop_remainder=True).prefetch(2)

    @staticmethod
    def loss(labels, logits):
        return tf.nn.sigmoid_cross_entropy_with_logits(labels, tf.reshape(logits, [-1]))

    @staticmethod
    def correct(labels, logits):
        return tf.cast(tf.equal(tf.cast(tf.reshape(logits, [-1]) > 0, tf.float32), labels),
                       tf.float32)

    def evaluate(self, model):
        """HR@10 and NDCG@10 of every user's held-out item."""
        hr, ndcg = movielens.evaluate(model, self.data, k=10)
        return {"hit_rate": hr, "ndcg": ndcg, "eval_users": int(self.data.num_users),
                "eval_candidates": int(self.data.eval_items.shape[1]), "k": 10}


def make_workload(config):
    """The workload of config.model (loads its data)."""
    if config.model == "ncf":
        return NCFWorkload(config)
    return ImageWorkload(config)
