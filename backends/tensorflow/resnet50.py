"""resnet50_train's model part on TensorFlow: ResNet-50 v1.5 built from Keras layers exactly as torchvision builds it,
or keras.applications.ResNet50 (v1) under its own name. The trainer (backends.tensorflow.train) runs it.

The network is a small custom Model holding functional sub-models: the stem, 16 bottleneck blocks and
the head. Each sub-model is built (its variables created) at construction, so wrapping a block's call
in tf.recompute_grad never creates variables inside the recomputed function, and the trainable
parameter count is known before any step (25,557,032 at 1000 classes, torchvision's count).

Padding as torch pads: a 3x3 or 7x7 convolution pads inside the convolution op (PaddedConv2D: tf.nn.conv2d with
explicit paddings, as cuDNN pads inside torch's), not in a ZeroPadding2D before it, which would be a pad kernel
forward and a slice backward that only XLA fuses away. Keras's Conv2D takes only 'valid' or 'same' (and 'same'
pads a strided convolution 0 before and 1 after, shifting every window), hence a small layer of this backend's.
The max pool keeps its ZeroPadding2D: tf.nn.max_pool2d's explicit padding fails under XLA, and pooling in
'valid' needs the pad before it.

Classifier precision (CLASSIFIER, the record's api.classifier): the head's Dense computes in the policy's compute
dtype (float16/bfloat16 under mixed precision), as torch's Linear does under autocast, and a float32 linear
Activation casts the logits to float32 for the loss, as Keras's mixed-precision guide has a model end.

Run on the CPU with TF 2.12 / Keras 2.12 and TF 2.21 / Keras 3.15 or tf_keras 2.21, in every execution
mode, and on an H200 with TF 2.21 (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from backends.tensorflow import compat
from harness.workloads.resnet50_train import EXPANSION, STAGES
from harness.workloads.training import BuildContext

keras = compat.keras

#: torchvision's BatchNorm2d defaults: eps 1e-5, momentum 0.1 (Keras counts momentum the other way).
BN_EPSILON = 1e-5
BN_MOMENTUM = 0.9

#: The record's api.classifier: the one classifier precision policy every backend's ResNet-50 follows.
CLASSIFIER = ("fc computes in the compute dtype (float16/bfloat16 under mixed precision), logits cast to float32 "
              "for the loss: keras.layers.Dense in the global policy, then (resnet50) Activation('linear', "
              "dtype='float32'), or (keras_resnet50_v1) the loss's own cast")


class PaddedConv2D(keras.layers.Layer):
    """A bias-free 2-D convolution padded symmetrically by `padding` inside the op, as torch's Conv2d(padding=p):
    tf.nn.conv2d with explicit paddings ([[0, 0], [p, p], [p, p], [0, 0]] in NHWC, [[0, 0], [0, 0], [p, p], [p, p]]
    in NCHW), which TensorFlow's kernels and XLA take, gradient included. Its one weight is Conv2D's kernel
    (height, width, in, out), initialised as Conv2D's (Glorot uniform), so weights transfer between the two.

    NCHW on a machine without a GPU, where TensorFlow's own CPU convolution kernels (their gradients) take NHWC
    only, runs as the NHWC convolution between two transposes (Keras 3's Conv2D XLA-compiles it there instead);
    on a GPU it is the NCHW convolution itself."""

    def __init__(self, filters: int, kernel: int, stride: int = 1, padding: int = 0,
                 data_format: str = "channels_last", **kwargs):
        super().__init__(**kwargs)
        self.filters, self.kernel_size, self.stride, self.padding = filters, kernel, stride, padding
        self.data_format = data_format

    def build(self, input_shape):
        channels = int(input_shape[1 if self.data_format == "channels_first" else -1])
        self.kernel = self.add_weight(name="kernel", shape=(self.kernel_size, self.kernel_size, channels, self.filters),
                                      initializer=keras.initializers.GlorotUniform(), trainable=True)
        self.nchw_on_cpu = self.data_format == "channels_first" and not tf.config.list_physical_devices("GPU")
        super().build(input_shape)

    def call(self, inputs):
        p, s = self.padding, self.stride
        if self.nchw_on_cpu:
            kernel = tf.cast(self.kernel, inputs.dtype)
            nhwc = tf.nn.conv2d(tf.transpose(inputs, [0, 2, 3, 1]), kernel, [1, s, s, 1],
                                [[0, 0], [p, p], [p, p], [0, 0]] if p else "VALID", data_format="NHWC")
            return tf.transpose(nhwc, [0, 3, 1, 2])
        if self.data_format == "channels_first":
            fmt, strides, paddings = "NCHW", [1, 1, s, s], [[0, 0], [0, 0], [p, p], [p, p]]
        else:
            fmt, strides, paddings = "NHWC", [1, s, s, 1], [[0, 0], [p, p], [p, p], [0, 0]]
        kernel = tf.cast(self.kernel, inputs.dtype)  # the compute dtype, as Conv2D reads its kernel
        return tf.nn.conv2d(inputs, kernel, strides, paddings if p else "VALID", data_format=fmt)

    def compute_output_shape(self, input_shape):
        first = self.data_format == "channels_first"
        size = [None if d is None else (int(d) + 2 * self.padding - self.kernel_size) // self.stride + 1
                for d in (input_shape[2:4] if first else input_shape[1:3])]
        return (input_shape[0], self.filters, *size) if first else (input_shape[0], *size, self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "kernel": self.kernel_size, "stride": self.stride,
                "padding": self.padding, "data_format": self.data_format}


def _layers(data_format: str):
    """Layer factories for one data format (conv without bias padded inside the op, torch-like BatchNorm)."""
    axis = 1 if data_format == "channels_first" else -1

    def conv(filters, kernel, stride=1, name=None, padding=0):
        return PaddedConv2D(filters, kernel, stride, padding, data_format=data_format, name=name)

    def bn(name=None):
        return keras.layers.BatchNormalization(axis=axis, epsilon=BN_EPSILON, momentum=BN_MOMENTUM, name=name)

    def pad(amount, name=None):
        # the max pool's explicit symmetric padding, then a 'valid' pool: what torch's padding=1 does (Keras's
        # 'same' pads a strided window 0 before and 1 after). A separate op: tf.nn.max_pool2d's explicit padding
        # fails under XLA, so the pool cannot pad inside itself as PaddedConv2D does
        return keras.layers.ZeroPadding2D(amount, data_format=data_format, name=name)

    return axis, conv, bn, pad


def _stem(input_shape, dtype: str, data_format: str):
    """conv 7x7/2 (64, no bias) + BN + ReLU + max pool 3x3/2, padded like torchvision."""
    _, conv, bn, pad = _layers(data_format)
    x = inputs = keras.Input(shape=input_shape, dtype=dtype, name="images")
    x = conv(64, 7, 2, name="conv1", padding=3)(x)
    x = bn(name="bn1")(x)
    x = keras.layers.ReLU(name="relu")(x)
    # torch pads the max pool with -inf; after the ReLU every value is >= 0, so zeros pick the same max
    x = pad(1, name="pool_pad")(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="valid", data_format=data_format, name="maxpool")(x)
    return keras.Model(inputs, x, name="stem")


def _bottleneck(input_shape, dtype: str, width: int, stride: int, project: bool, data_format: str, name: str):
    """torchvision's Bottleneck (v1.5: the stride is on the 3x3 conv), projection shortcut when `project`."""
    _, conv, bn, _ = _layers(data_format)
    x = inputs = keras.Input(shape=input_shape, dtype=dtype, name=f"{name}_in")
    y = conv(width, 1, name=f"{name}_conv1")(x)
    y = bn(name=f"{name}_bn1")(y)
    y = keras.layers.ReLU(name=f"{name}_relu1")(y)
    y = conv(width, 3, stride, name=f"{name}_conv2", padding=1)(y)
    y = bn(name=f"{name}_bn2")(y)
    y = keras.layers.ReLU(name=f"{name}_relu2")(y)
    y = conv(width * EXPANSION, 1, name=f"{name}_conv3")(y)
    y = bn(name=f"{name}_bn3")(y)
    if project:
        shortcut = conv(width * EXPANSION, 1, stride, name=f"{name}_downsample_conv")(x)
        shortcut = bn(name=f"{name}_downsample_bn")(shortcut)
    else:
        shortcut = x
    y = keras.layers.Add(name=f"{name}_add")([y, shortcut])
    y = keras.layers.ReLU(name=f"{name}_out")(y)
    return keras.Model(inputs, y, name=name)


def _head(input_shape, dtype: str, num_classes: int, data_format: str):
    """Global average pool + Dense in the policy's compute dtype, the logits cast to float32 (CLASSIFIER)."""
    x = inputs = keras.Input(shape=input_shape, dtype=dtype, name="features")
    x = keras.layers.GlobalAveragePooling2D(data_format=data_format, name="avgpool")(x)
    x = keras.layers.Dense(num_classes, name="fc")(x)
    x = keras.layers.Activation("linear", dtype="float32", name="logits")(x)
    return keras.Model(inputs, x, name="head")


def _output_shape(model) -> tuple:
    shape = model.output_shape if hasattr(model, "output_shape") else model.outputs[0].shape
    return tuple(int(d) for d in shape[1:])


class ResNet50(keras.Model):
    """stem -> 16 bottleneck blocks (each recomputed under recompute: blocks) -> head."""

    def __init__(self, stem, blocks: list, head):
        super().__init__(name="resnet50_v1_5")
        self.stem = stem
        self.blocks = blocks
        self.head = head

    def call(self, x, training=False):
        """The logits (float32, from the compute dtype's classifier) of a batch of images."""
        x = self.stem(x, training=training)
        for block in self.blocks:
            x = block(x, training=training)
        return self.head(x, training=training)


def build_resnet50(image_size: int, num_classes: int, data_format: str, block: Callable = lambda b: b):
    """ResNet-50 v1.5 as torchvision builds it, from Keras layers, in the current dtype policy; each bottleneck
    block passed through `block` (BuildContext.block: wrapped in tf.recompute_grad under recompute: blocks)."""
    dtype = compat.compute_dtype()
    input_shape = (3, image_size, image_size) if data_format == "channels_first" else (image_size, image_size, 3)
    stem = _stem(input_shape, dtype, data_format)
    shape = _output_shape(stem)
    blocks = []
    in_channels = 64
    for stage, (width, count, stride) in enumerate(STAGES, start=1):
        for index in range(count):
            first = index == 0
            bottleneck = _bottleneck(
                shape,
                dtype,
                width,
                stride if first else 1,
                first and (stride != 1 or in_channels != width * EXPANSION),
                data_format,
                name=f"layer{stage}_{index}",
            )
            shape = _output_shape(bottleneck)
            blocks.append(block(bottleneck))
            in_channels = width * EXPANSION
    head = _head(shape, dtype, num_classes, data_format)
    return ResNet50(stem, blocks, head)


def build_keras_resnet50_v1(image_size: int, num_classes: int, data_format: str):
    """keras.applications.ResNet50 (v1: stride on the 1x1 conv, conv bias), untrained, returning logits."""
    input_shape = (3, image_size, image_size) if data_format == "channels_first" else (image_size, image_size, 3)
    with compat.image_data_format(data_format):  # keras.applications reads the global format
        return keras.applications.ResNet50(
            weights=None, classes=num_classes, input_shape=input_shape, classifier_activation=None
        )


class ResNet50Part:
    """The ModelPart of resnet50_train: `model: resnet50` (v1.5, blocks recomputable) or `keras_resnet50_v1`."""

    #: what one block is, for the record's api.recompute
    block_name = "bottleneck block"
    #: the record's api.classifier
    classifier = CLASSIFIER

    def build(self, params, ctx: BuildContext):
        """The model of `params.model` in `ctx.layout` (the data format), under the global dtype policy."""
        if params.model == "resnet50":
            return build_resnet50(params.image_size, params.num_classes, ctx.layout, ctx.block)
        # one functional graph: no block boundaries (recompute: blocks is refused for it, TensorFlowBackend)
        return build_keras_resnet50_v1(params.image_size, params.num_classes, ctx.layout)

    def describe(self, params) -> str:
        """What the model is, for the record's api.model."""
        if params.model == "resnet50":
            return "ResNet-50 v1.5 from Keras layers (torchvision layout: stride on 3x3, no conv bias)"
        return "keras.applications.ResNet50(weights=None, classifier_activation=None) (v1, conv bias)"


PART = ResNet50Part()
