"""resnet50_train's model part on TensorFlow: ResNet-50 v1.5 built from Keras layers exactly as torchvision builds it,
or keras.applications.ResNet50 (v1) under its own name. The trainer (backends.tensorflow.train) runs it.

The network is a small custom Model holding functional sub-models: the stem, 16 bottleneck blocks and
the head. Each sub-model is built (its variables created) at construction, so wrapping a block's call
in tf.recompute_grad never creates variables inside the recomputed function, and the trainable
parameter count is known before any step (25,557,032 at 1000 classes, torchvision's count). The logits are
float32 under every precision policy (the head's Dense), as the loss is computed on them.

Run on the CPU with TF 2.12 / Keras 2.12 and TF 2.21 / Keras 3.15 or tf_keras 2.21, in every execution
mode, and on an H200 with TF 2.21 (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Callable

from backends.tensorflow import compat
from harness.workloads.resnet50_train import EXPANSION, STAGES
from harness.workloads.training import BuildContext

keras = compat.keras

#: torchvision's BatchNorm2d defaults: eps 1e-5, momentum 0.1 (Keras counts momentum the other way).
BN_EPSILON = 1e-5
BN_MOMENTUM = 0.9

def _layers(data_format: str):
    """Layer factories for one data format (conv without bias, torch-like BatchNorm)."""
    axis = 1 if data_format == "channels_first" else -1

    def conv(filters, kernel, stride=1, name=None):
        return keras.layers.Conv2D(
            filters, kernel, strides=stride, padding="valid", use_bias=False, data_format=data_format, name=name
        )

    def bn(name=None):
        return keras.layers.BatchNormalization(axis=axis, epsilon=BN_EPSILON, momentum=BN_MOMENTUM, name=name)

    def pad(amount, name=None):
        # explicit symmetric padding, then a 'valid' conv or pool: what torch's padding=k does. Keras's
        # 'same' pads a strided conv asymmetrically (0 before, 1 after), which shifts every window.
        return keras.layers.ZeroPadding2D(amount, data_format=data_format, name=name)

    return axis, conv, bn, pad


def _stem(input_shape, dtype: str, data_format: str):
    """conv 7x7/2 (64, no bias) + BN + ReLU + max pool 3x3/2, padded like torchvision."""
    _, conv, bn, pad = _layers(data_format)
    x = inputs = keras.Input(shape=input_shape, dtype=dtype, name="images")
    x = pad(3, name="conv1_pad")(x)
    x = conv(64, 7, 2, name="conv1")(x)
    x = bn(name="bn1")(x)
    x = keras.layers.ReLU(name="relu")(x)
    # torch pads the max pool with -inf; after the ReLU every value is >= 0, so zeros pick the same max
    x = pad(1, name="pool_pad")(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="valid", data_format=data_format, name="maxpool")(x)
    return keras.Model(inputs, x, name="stem")


def _bottleneck(input_shape, dtype: str, width: int, stride: int, project: bool, data_format: str, name: str):
    """torchvision's Bottleneck (v1.5: the stride is on the 3x3 conv), projection shortcut when `project`."""
    _, conv, bn, pad = _layers(data_format)
    x = inputs = keras.Input(shape=input_shape, dtype=dtype, name=f"{name}_in")
    y = conv(width, 1, name=f"{name}_conv1")(x)
    y = bn(name=f"{name}_bn1")(y)
    y = keras.layers.ReLU(name=f"{name}_relu1")(y)
    y = pad(1, name=f"{name}_pad2")(y)
    y = conv(width, 3, stride, name=f"{name}_conv2")(y)
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
    """Global average pool + Dense, whose logits are float32 under every policy (the loss is computed on them)."""
    x = inputs = keras.Input(shape=input_shape, dtype=dtype, name="features")
    x = keras.layers.GlobalAveragePooling2D(data_format=data_format, name="avgpool")(x)
    x = keras.layers.Dense(num_classes, dtype="float32", name="fc")(x)
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
        """The logits (float32) of a batch of images."""
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
