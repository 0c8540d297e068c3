"""deepreduce_tf.models: ResNet-20 builds with the published size and shapes."""
import numpy as np
import pytest
import tensorflow as tf

from deepreduce_tf import models


@pytest.fixture(scope="module")
def resnet20():
    return models.resnet20()


def test_resnet20_size(resnet20):
    trainable = sum(int(np.prod(v.shape)) for v in resnet20.trainable_variables)
    assert trainable == 269_722  # "0.27 M" in He et al. 2016, table 6
    assert resnet20.count_params() == 271_098  # + 1,376 batch-norm moving statistics
    assert len(resnet20.trainable_variables) == 59
    convs = [v for v in resnet20.trainable_variables if "conv" in v.path]
    assert len(convs) == 19  # + the dense layer: 20 weighted layers
    assert sorted({int(v.shape[-1]) for v in convs}) == [16, 32, 64]


def test_resnet20_forward(resnet20):
    x = tf.random.stateless_normal([3, 32, 32, 3], seed=[1, 2])
    logits = resnet20(x, training=False)
    assert logits.shape == (3, 10) and logits.dtype == tf.float32
    assert np.all(np.isfinite(logits.numpy()))
    assert resnet20.get_layer("stage3_block1_shortcut").output.shape == (None, 8, 8, 64)


def test_resnet20_gradients_reach_every_variable(resnet20):
    x = tf.random.stateless_normal([2, 32, 32, 3], seed=[3, 4])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(resnet20(x, training=True) ** 2)
    grads = tape.gradient(loss, resnet20.trainable_variables)
    assert all(g is not None and g.shape == v.shape
               for g, v in zip(grads, resnet20.trainable_variables))


def test_options():
    m = models.resnet(32, input_shape=(28, 28, 1), num_classes=5, weight_decay=1e-4)
    assert m.output_shape == (None, 5)
    assert len(m.losses) == 32  # one L2 term per kernel: 31 convolutions + dense
    with pytest.raises(ValueError, match="6n"):
        models.resnet(21)
