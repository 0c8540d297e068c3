"""deepreduce_bench.models: ResNet-20, ResNet-50 and NeuMF build with the published sizes."""
import numpy as np
import pytest
import tensorflow as tf

from deepreduce_bench import models


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


# ---------------------------------------------------------------------------
# ResNet-50

def test_resnet50_size():
    m = models.resnet50()
    trainable = sum(int(np.prod(v.shape)) for v in m.trainable_variables)
    assert trainable == 25_557_032  # the standard ResNet-50 figure
    assert m.count_params() == 25_557_032 + 53_120  # + batch-norm moving statistics
    # 53 convolutions (49 on the main path + 4 projections) + the classifier
    kernels = [v for v in m.trainable_variables if v.path.endswith("kernel")]
    assert len(kernels) == 54
    assert m.output_shape == (None, 1000)


def test_resnet50_is_v1_5():
    m = models.resnet50(input_shape=(64, 64, 3), num_classes=10)
    # the stride of a downsampling block sits on its 3x3 convolution
    assert m.get_layer("stage2_block1_1_conv").strides == (1, 1)
    assert m.get_layer("stage2_block1_2_conv").strides == (2, 2)
    assert m.get_layer("stage2_block1_proj_conv").strides == (2, 2)
    assert m.get_layer("stage2_block1_out").output.shape == (None, 8, 8, 512)


def test_resnet50_forward_and_gradients_at_32x32():
    m = models.resnet50(input_shape=(32, 32, 3), num_classes=10, weight_decay=5e-5)
    assert m.get_layer("stage4_block3_out").output.shape == (None, 1, 1, 2048)
    assert len(m.losses) == 54
    x = tf.random.stateless_normal([2, 32, 32, 3], seed=[5, 6])
    with tf.GradientTape() as tape:
        logits = m(x, training=True)
        loss = tf.reduce_sum(logits ** 2)
    assert logits.shape == (2, 10) and np.all(np.isfinite(logits.numpy()))
    grads = tape.gradient(loss, m.trainable_variables)
    assert all(g is not None and g.shape == v.shape for g, v in zip(grads, m.trainable_variables))


def test_zero_init_residual_and_depths():
    m = models.resnet50(input_shape=(32, 32, 3), num_classes=4, zero_init_residual=True)
    np.testing.assert_array_equal(m.get_layer("stage1_block1_3_bn").gamma.numpy(), 0.0)
    np.testing.assert_array_equal(m.get_layer("stage1_block1_2_bn").gamma.numpy(), 1.0)
    with pytest.raises(ValueError, match="50, 101, 152"):
        models.imagenet_resnet(34)


# ---------------------------------------------------------------------------
# NeuMF

def neumf_param_count(num_users, num_items, mf_dim, mlp_layers):
    """Counted from the architecture's description, not from the model."""
    embeddings = (num_users + num_items) * (mf_dim + mlp_layers[0] // 2)
    hidden = sum((a + 1) * b for a, b in zip(mlp_layers[:-1], mlp_layers[1:]))
    return embeddings + hidden + mf_dim + mlp_layers[-1] + 1


@pytest.mark.parametrize("num_users,num_items,mf_dim,mlp_layers", [
    (943, 1682, 8, (64, 32, 16, 8)),
    (10, 7, 3, (6,)),
    (5, 9, 16, (32, 8)),
])
def test_neumf_size(num_users, num_items, mf_dim, mlp_layers):
    m = models.neumf(num_users, num_items, mf_dim=mf_dim, mlp_layers=mlp_layers)
    assert m.count_params() == neumf_param_count(num_users, num_items, mf_dim, mlp_layers)
    assert len(m.non_trainable_variables) == 0


def test_neumf_default_size():
    # (943 + 1682) * (8 + 32) + 2,080 + 528 + 136 + 17
    assert models.neumf(943, 1682).count_params() == 107_761


def test_neumf_forward_and_sparse_embedding_gradients():
    m = models.neumf(20, 30)
    users = tf.constant([0, 3, 19, 3], tf.int32)
    items = tf.constant([29, 0, 5, 5], tf.int32)
    with tf.GradientTape() as tape:
        logits = m([users, items], training=True)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
            tf.ones_like(logits), logits))
    assert logits.shape == (4, 1) and logits.dtype == tf.float32
    assert np.all(np.isfinite(logits.numpy()))
    grads = dict(zip((v.path for v in m.trainable_variables),
                     tape.gradient(loss, m.trainable_variables)))
    embeddings = {p: g for p, g in grads.items() if "embedding" in p}
    assert len(embeddings) == 4
    for path, g in embeddings.items():
        assert isinstance(g, tf.IndexedSlices), path
        expected = users if "user" in path else items
        np.testing.assert_array_equal(np.sort(g.indices.numpy()), np.sort(expected.numpy()))
    assert all(isinstance(g, tf.Tensor) for p, g in grads.items() if "embedding" not in p)


def test_neumf_options():
    m = models.neumf(4, 5, l2=1e-6)
    assert len(m.losses) == 4 + 4  # four tables, three hidden kernels + prediction
    with pytest.raises(ValueError, match="even"):
        models.neumf(4, 5, mlp_layers=(7, 4))
    with pytest.raises(ValueError, match=">= 1"):
        models.neumf(0, 5)
