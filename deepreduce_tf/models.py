"""Models whose gradients the benchmarks compress (Keras 3).

resnet20(): the CIFAR-style ResNet-20 of He et al. 2016 (section 4.2): a 3x3
convolution with 16 filters, then 3 stages of 3 basic blocks (two 3x3
convolutions each) with 16, 32 and 64 filters, global average pooling and a
dense classifier; 6n + 2 = 20 weighted layers for n = 3. Shortcuts are
identities; where a stage halves the resolution and doubles the width the
shortcut subsamples by 2 and zero-pads the new channels ("option A"), which
adds no parameters: 271,098 parameters in total for 10 classes, 269,722 of
them trainable in 59 variables (1,376 are batch-norm moving statistics). The DeepReduce paper
trains this network on CIFAR-10.
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


def _basic_block(x, filters, stride, weight_decay, name):
    shortcut = x
    y = _conv(filters, stride, weight_decay, f"{name}_conv1")(x)
    y = layers.BatchNormalization(name=f"{name}_bn1")(y)
    y = layers.Activation("relu", name=f"{name}_relu1")(y)
    y = _conv(filters, 1, weight_decay, f"{name}_conv2")(y)
    y = layers.BatchNormalization(name=f"{name}_bn2")(y)
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
    x = layers.BatchNormalization(name="stem_bn")(x)
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
