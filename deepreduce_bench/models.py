"""Models whose gradients the benchmarks compress (Keras 3, functional API).

resnet20(): the CIFAR-style ResNet-20 of He et al. 2016 (section 4.2): a 3x3
convolution with 16 filters, then 3 stages of 3 basic blocks (two 3x3
convolutions each) with 16, 32 and 64 filters, global average pooling and a
dense classifier; 6n + 2 = 20 weighted layers for n = 3. Shortcuts are
identities; where a stage halves the resolution and doubles the width the
shortcut subsamples by 2 and zero-pads the new channels ("option A"), which
adds no parameters: 271,098 parameters in total for 10 classes, 269,722 of
them trainable in 59 variables (1,376 are batch-norm moving statistics). The DeepReduce paper
trains this network on CIFAR-10.

resnet50(): the ImageNet ResNet-50 of He et al. 2016 (table 1) in the "v1.5"
form that tf_cnn_benchmarks, MLPerf and torchvision train: in each bottleneck
block the stride sits on the 3x3 convolution, not on the first 1x1. The stride
move changes no shapes of weights: 25,557,032 trainable parameters for
224x224x3 inputs and 1,000 classes (the figure usually quoted), plus 53,120
batch-norm moving statistics. See imagenet_resnet() for the choices.

neumf(): Neural Matrix Factorization (He et al. 2017, "Neural Collaborative
Filtering"): a GMF tower (element-wise product of user and item embeddings) and
an MLP tower (concatenated embeddings through ReLU layers) joined by one dense
unit that outputs the logit of an interaction. Its embedding gradients are
tf.IndexedSlices: the sparse gradients the compressors are built for.
"""
import keras
from keras import layers, ops


@keras.saving.register_keras_serializable(package="deepreduce_tf")
class ShortcutPad(layers.Layer):
    """Option-A shortcut: subsample by `stride`, zero-pad channels to `filters`."""

    def __init__(self, filters, stride, **kwargs):
        super().__init__(**kwargs)
        self.filters = filters
        self.stride = stride

    def call(self, x):
        x = x[:, ::self.stride, ::self.stride, :]
        extra = self.filters - x.shape[-1]
        return ops.pad(x, [[0, 0], [0, 0], [0, 0], [extra // 2, extra - extra // 2]])

    def compute_output_shape(self, input_shape):
        n, h, w, _ = input_shape
        s = self.stride
        return (n, None if h is None else -(-h // s), None if w is None else -(-w // s),
                self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "stride": self.stride}


def _conv(filters, stride, weight_decay, name):
    reg = keras.regularizers.L2(weight_decay) if weight_decay else None
    return layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False,
                         kernel_initializer="he_normal", kernel_regularizer=reg, name=name)


def _cifar_bn(name):
    # Moving statistics with momentum 0.9 (PyTorch's 0.1): with Keras' default
    # 0.99 they lag far behind the weights in short, high-learning-rate runs
    # and evaluation accuracy collapses while training accuracy is fine.
    return layers.BatchNormalization(momentum=0.9, name=name)


def _basic_block(x, filters, stride, weight_decay, name):
    shortcut = x
    y = _conv(filters, stride, weight_decay, f"{name}_conv1")(x)
    y = _cifar_bn(f"{name}_bn1")(y)
    y = layers.Activation("relu", name=f"{name}_relu1")(y)
    y = _conv(filters, 1, weight_decay, f"{name}_conv2")(y)
    y = _cifar_bn(f"{name}_bn2")(y)
    if stride != 1 or x.shape[-1] != filters:
        shortcut = ShortcutPad(filters, stride, name=f"{name}_shortcut")(x)
    y = layers.Add(name=f"{name}_add")([y, shortcut])
    return layers.Activation("relu", name=f"{name}_out")(y)


def resnet(depth=20, input_shape=(32, 32, 3), num_classes=10, weight_decay=0.0,
           name=None):
    """A CIFAR-style ResNet of depth 6n + 2 (20, 32, 44, 56, 110).

    Args:
      depth: 6n + 2 for n basic blocks per stage.
      input_shape: (height, width, channels) of one image.
      num_classes: width of the final dense layer (logits; no softmax).
      weight_decay: L2 coefficient on the convolution and dense kernels
        (adds to model.losses; a custom training loop must add those).
      name: model name, default "resnet{depth}".

    Returns:
      keras.Model mapping float32 [N, *input_shape] to logits [N, num_classes].

    Raises:
      ValueError: depth is not 6n + 2 with n >= 1.
    """
    if depth < 8 or (depth - 2) % 6:
        raise ValueError(f"depth must be 6n + 2 with n >= 1 (20, 32, 44, 56, 110), got {depth}")
    blocks = (depth - 2) // 6
    inputs = keras.Input(shape=input_shape, name="images")
    x = _conv(16, 1, weight_decay, "stem_conv")(inputs)
    x = _cifar_bn("stem_bn")(x)
    x = layers.Activation("relu", name="stem_relu")(x)
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _basic_block(x, filters, stride, weight_decay, f"stage{stage + 1}_block{block + 1}")
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    reg = keras.regularizers.L2(weight_decay) if weight_decay else None
    outputs = layers.Dense(num_classes, kernel_initializer="he_normal", kernel_regularizer=reg,
                           name="logits")(x)
    return keras.Model(inputs, outputs, name=name or f"resnet{depth}")


def resnet20(input_shape=(32, 32, 3), num_classes=10, weight_decay=0.0):
    """ResNet-20 (He et al. 2016, CIFAR variant); see resnet()."""
    return resnet(20, input_shape, num_classes, weight_decay)


# ---------------------------------------------------------------------------
# ImageNet ResNets (bottleneck, v1.5)

_IMAGENET_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
# Batch norm as in the reference TF and PyTorch ImageNet trainings.
_BN_MOMENTUM = 0.9
_BN_EPSILON = 1e-5


def _conv_bn(x, filters, kernel, stride, weight_decay, name, gamma_zero=False):
    reg = keras.regularizers.L2(weight_decay) if weight_decay else None
    # He initialization over fan_out (as torchvision): keeps the backward signal's
    # variance constant through the ReLU stack, the concern of deep bottleneck nets.
    init = keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")
    if stride > 1 and kernel > 1:
        # Explicit symmetric padding, then "valid": Keras' "same" pads only
        # bottom/right for even inputs with stride 2, which shifts the sampling
        # grid by half a pixel against the reference implementations.
        pad = (kernel - 1) // 2
        x = layers.ZeroPadding2D(pad, name=f"{name}_pad")(x)
        padding = "valid"
    else:
        padding = "same"
    x = layers.Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=False,
                      kernel_initializer=init, kernel_regularizer=reg, name=f"{name}_conv")(x)
    return layers.BatchNormalization(
        momentum=_BN_MOMENTUM, epsilon=_BN_EPSILON,
        gamma_initializer="zeros" if gamma_zero else "ones", name=f"{name}_bn")(x)


def _bottleneck(x, filters, stride, weight_decay, zero_init_residual, name):
    """1x1 (filters) -> 3x3 (filters, stride) -> 1x1 (4 * filters), plus shortcut."""
    out_filters = 4 * filters
    y = _conv_bn(x, filters, 1, 1, weight_decay, f"{name}_1")
    y = layers.Activation("relu", name=f"{name}_1_relu")(y)
    y = _conv_bn(y, filters, 3, stride, weight_decay, f"{name}_2")
    y = layers.Activation("relu", name=f"{name}_2_relu")(y)
    y = _conv_bn(y, out_filters, 1, 1, weight_decay, f"{name}_3", gamma_zero=zero_init_residual)
    if stride != 1 or x.shape[-1] != out_filters:
        # Projection shortcut ("option B"): the strided 1x1 convolution
        # samples the same pixels as the strided 3x3 of the main path.
        shortcut = _conv_bn(x, out_filters, 1, stride, weight_decay, f"{name}_proj")
    else:
        shortcut = x
    y = layers.Add(name=f"{name}_add")([y, shortcut])
    return layers.Activation("relu", name=f"{name}_out")(y)


def imagenet_resnet(depth=50, input_shape=(224, 224, 3), num_classes=1000, weight_decay=0.0,
                    zero_init_residual=False, name=None):
    """An ImageNet-style bottleneck ResNet (v1.5) of depth 50, 101 or 152.

    Stem: 7x7/2 convolution with 64 filters, batch norm, ReLU, 3x3/2 max pool.
    Four stages of bottleneck blocks with 64, 128, 256, 512 inner filters
    (4x that many outputs); the first block of stages 2-4 halves the resolution
    with stride 2 on its 3x3 convolution and a strided 1x1 projection shortcut
    (the first block of stage 1 projects 64 -> 256 channels at stride 1). Then
    global average pooling and a dense classifier.

    Choices: convolutions have no bias (batch norm follows each one); kernels
    use He-normal initialization over fan_out; batch norm uses momentum 0.9 and
    epsilon 1e-5; the classifier is initialized from N(0, 0.01^2) with zero
    bias, as in Goyal et al. 2017 and tf_cnn_benchmarks. Any input of at least
    32x32 builds (32x32 reaches 1x1 before pooling).

    Args:
      depth: 50, 101 or 152.
      input_shape: (height, width, channels) of one image.
      num_classes: width of the final dense layer (logits; no softmax).
      weight_decay: L2 coefficient on every convolution and dense kernel (not
        on batch-norm parameters or biases): each kernel adds
        weight_decay * sum(w ** 2) to model.losses, whose gradient is
        2 * weight_decay * w. The usual ImageNet decay of 1e-4 on the gradient
        is therefore weight_decay=5e-5. A custom training loop must add
        model.losses itself.
      zero_init_residual: start the last batch norm of every block with
        gamma = 0, so each block begins as the identity (Goyal et al. 2017);
        helps large-batch training.
      name: model name, default "resnet{depth}".

    Returns:
      keras.Model mapping float32 [N, *input_shape] to logits [N, num_classes].

    Raises:
      ValueError: unsupported depth.
    """
    if depth not in _IMAGENET_BLOCKS:
        raise ValueError(f"ImageNet ResNet depth must be one of "
                         f"{', '.join(map(str, _IMAGENET_BLOCKS))}, got {depth}")
    inputs = keras.Input(shape=input_shape, name="images")
    x = _conv_bn(inputs, 64, 7, 2, weight_decay, "stem")
    x = layers.Activation("relu", name="stem_relu")(x)
    x = layers.ZeroPadding2D(1, name="stem_pool_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="stem_pool")(x)
    for stage, (blocks, filters) in enumerate(zip(_IMAGENET_BLOCKS[depth], (64, 128, 256, 512))):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _bottleneck(x, filters, stride, weight_decay, zero_init_residual,
                            f"stage{stage + 1}_block{block + 1}")
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    reg = keras.regularizers.L2(weight_decay) if weight_decay else None
    outputs = layers.Dense(num_classes, kernel_initializer=keras.initializers.RandomNormal(0.0, 0.01),
                           kernel_regularizer=reg, name="logits")(x)
    return keras.Model(inputs, outputs, name=name or f"resnet{depth}")


def resnet50(input_shape=(224, 224, 3), num_classes=1000, weight_decay=0.0,
             zero_init_residual=False):
    """ResNet-50 v1.5 (He et al. 2016, ImageNet variant); see imagenet_resnet()."""
    return imagenet_resnet(50, input_shape, num_classes, weight_decay, zero_init_residual)


# ---------------------------------------------------------------------------
# NeuMF

def neumf(num_users, num_items, mf_dim=8, mlp_layers=(64, 32, 16, 8), l2=0.0, name="neumf"):
    """Neural Matrix Factorization (He et al. 2017, section 3.4).

    GMF tower: user and item embeddings of width mf_dim, multiplied element-wise.
    MLP tower: user and item embeddings of width mlp_layers[0] // 2 each,
    concatenated (width mlp_layers[0]) and passed through ReLU dense layers of
    widths mlp_layers[1:]. The two towers' outputs are concatenated and one
    dense unit gives the logit of "user interacted with item" (train with
    binary cross-entropy from logits; sigmoid gives the probability).

    Defaults are the paper's and its reference code's: 8 predictive factors
    per tower (mf_dim=8, last MLP layer 8) and the tower [64, 32, 16, 8].
    Initialization as in the paper: embeddings from N(0, 0.01^2), hidden
    layers Glorot-uniform, the prediction unit LeCun-uniform; biases zero.

    Parameters: (num_users + num_items) * (mf_dim + mlp_layers[0] // 2)
    + sum over the hidden layers of (in + 1) * out + (mf_dim + mlp_layers[-1] + 1).

    Args:
      num_users, num_items: sizes of the embedding tables (ids 0..n-1).
      mf_dim: width of the GMF embeddings.
      mlp_layers: width of the concatenated MLP embeddings (even), then the
        widths of the hidden layers.
      l2: L2 coefficient on the embedding tables and dense kernels
        (model.losses; 0 disables, as in the paper's reported runs).
      name: model name.

    Returns:
      keras.Model with inputs [user, item] (int32 [N] each) and output
      float32 logits [N, 1].

    Raises:
      ValueError: non-positive sizes or an odd mlp_layers[0].
    """
    mlp_layers = tuple(int(w) for w in mlp_layers)
    if num_users < 1 or num_items < 1 or mf_dim < 1:
        raise ValueError(f"num_users, num_items and mf_dim must be >= 1, got "
                         f"{num_users}, {num_items}, {mf_dim}")
    if len(mlp_layers) < 1 or min(mlp_layers) < 1 or mlp_layers[0] % 2:
        raise ValueError("mlp_layers must be positive widths, the first one even (it is the "
                         f"concatenation of two equal embeddings), got {list(mlp_layers)}")
    reg = keras.regularizers.L2(l2) if l2 else None
    emb_init = keras.initializers.RandomNormal(0.0, 0.01)

    def embedding(n, dim, name):
        return layers.Embedding(n, dim, embeddings_initializer=emb_init,
                                embeddings_regularizer=reg, name=name)

    user = keras.Input(shape=(), dtype="int32", name="user")
    item = keras.Input(shape=(), dtype="int32", name="item")
    gmf = layers.Multiply(name="gmf")([embedding(num_users, mf_dim, "gmf_user_embedding")(user),
                                       embedding(num_items, mf_dim, "gmf_item_embedding")(item)])
    half = mlp_layers[0] // 2
    x = layers.Concatenate(name="mlp_concat")(
        [embedding(num_users, half, "mlp_user_embedding")(user),
         embedding(num_items, half, "mlp_item_embedding")(item)])
    for i, width in enumerate(mlp_layers[1:]):
        x = layers.Dense(width, activation="relu", kernel_regularizer=reg, name=f"mlp_{i + 1}")(x)
    x = layers.Concatenate(name="neumf_concat")([gmf, x])
    logits = layers.Dense(1, kernel_initializer="lecun_uniform", kernel_regularizer=reg,
                          name="prediction")(x)
    return keras.Model([user, item], logits, name=name)
