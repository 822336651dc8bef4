"""ResNet-50 v1.5 in Flax (linen), laid out exactly as torchvision builds it: the model part of resnet50_train
that the JAX backend carries (`PART`; its trainer, harness_jax.train, trains it).

Stride on the 3x3 conv of each bottleneck (v1.5), no conv bias, BatchNorm eps 1e-5 and momentum 0.1 in
torch's sense (Flax, like Keras, counts momentum the other way: 0.9), a projection shortcut on the first
block of every stage, global average pool and a linear classifier: 25,557,032 trainable parameters at 1000
classes, torchvision's count. Initialized as torchvision initializes (Kaiming normal, fan_out, on the convs;
PyTorch's Linear default on the classifier).

`layout` is the logical dimension order of every activation: "NHWC" (channels_last, Flax's own) or "NCHW"
(channels_first). The convolutions are jax.lax.conv_general_dilated with that order (flax.linen.Conv knows
only NHWC), the kernels are HWIO in both, so both layouts hold the same parameters. Inside jax.jit, XLA's
layout assignment chooses the physical layout of every buffer whatever the logical order.

`dtype` is the compute dtype (bfloat16/float16 under mixed precision): parameters stay float32 and are cast
where used; BatchNorm reduces in float32; the classifier computes in `dtype` too, as torch's Linear under autocast and
the Keras part's Dense do, and its logits are cast to float32 for the loss (`classifier`, the record's api.classifier).
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from harness.workloads.resnet50_train import EXPANSION, STAGES, ResNet50Params
from harness.workloads.training import BuildContext
from harness_jax.precision import compute_dtype

#: torchvision's BatchNorm2d: eps 1e-5, momentum 0.1 (running = 0.9 * running + 0.1 * batch) = Flax's 0.9.
BN_EPSILON = 1e-5
BN_MOMENTUM = 0.9

#: torchvision's conv init: kaiming_normal_(mode="fan_out", nonlinearity="relu").
conv_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")
#: torch.nn.Linear's default: weight and bias uniform in +-1/sqrt(fan_in).
linear_init = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def channel_axis(layout: str) -> int:
    """The channels' axis of an activation in `layout` (NCHW or NHWC)."""
    return 1 if layout == "NCHW" else 3


def spatial_axes(layout: str) -> tuple[int, int]:
    """The height and width axes of an activation in `layout`."""
    return (2, 3) if layout == "NCHW" else (1, 2)


class Conv(nn.Module):
    """A bias-free 2-D convolution with symmetric padding (torch's padding=p) in either layout; kernel HWIO."""

    features: int
    kernel: int
    stride: int = 1
    padding: int = 0
    layout: str = "NHWC"
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        in_features = x.shape[channel_axis(self.layout)]
        kernel = self.param("kernel", conv_init, (self.kernel, self.kernel, in_features, self.features), jnp.float32)
        return jax.lax.conv_general_dilated(
            x.astype(self.dtype),
            kernel.astype(self.dtype),
            window_strides=(self.stride, self.stride),
            padding=((self.padding, self.padding), (self.padding, self.padding)),
            dimension_numbers=(self.layout, "HWIO", self.layout),
        )


def batch_norm(layout: str, dtype, train: bool, name: str) -> nn.BatchNorm:
    """torchvision's BatchNorm2d over the channels of `layout`, statistics and parameters in float32."""
    return nn.BatchNorm(use_running_average=not train, axis=channel_axis(layout), momentum=BN_MOMENTUM,
                        epsilon=BN_EPSILON, dtype=dtype, param_dtype=jnp.float32, name=name)


def max_pool(x, layout: str):
    """3x3 stride-2 max pool, padded by 1 with -inf (torch's MaxPool2d(3, 2, 1))."""
    window = (1, 1, 3, 3) if layout == "NCHW" else (1, 3, 3, 1)
    strides = (1, 1, 2, 2) if layout == "NCHW" else (1, 2, 2, 1)
    pad = ((0, 0), (0, 0), (1, 1), (1, 1)) if layout == "NCHW" else ((0, 0), (1, 1), (1, 1), (0, 0))
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, strides, pad)


class Bottleneck(nn.Module):
    """torchvision's Bottleneck: 1x1 reduce, 3x3 (stride here: v1.5), 1x1 expand, projection when `project`."""

    width: int
    stride: int
    project: bool
    layout: str
    dtype: Any
    train: bool

    @nn.compact
    def __call__(self, x):
        conv = lambda f, k, s, p, name: Conv(f, k, s, p, self.layout, self.dtype, name=name)  # noqa: E731
        bn = lambda name: batch_norm(self.layout, self.dtype, self.train, name)  # noqa: E731
        y = nn.relu(bn("bn1")(conv(self.width, 1, 1, 0, "conv1")(x)))
        y = nn.relu(bn("bn2")(conv(self.width, 3, self.stride, 1, "conv2")(y)))
        y = bn("bn3")(conv(self.width * EXPANSION, 1, 1, 0, "conv3")(y))
        if self.project:
            shortcut = bn("downsample_bn")(conv(self.width * EXPANSION, 1, self.stride, 0, "downsample_conv")(x))
        else:
            shortcut = x.astype(self.dtype)
        return nn.relu(y + shortcut)


class ResNet50(nn.Module):
    """stem -> 16 bottleneck blocks -> head.

    Takes images in `layout` (float32, cast to `dtype` by the first conv), returns float32 logits. `blocks` is
    the class of each bottleneck block in order, `nn.remat(Bottleneck)` for one recomputed in the backward pass
    (BuildContext.block); () builds every one as Bottleneck.
    """

    num_classes: int = 1000
    layout: str = "NHWC"
    dtype: Any = jnp.float32
    blocks: tuple = ()
    train: bool = True

    @nn.compact
    def __call__(self, x):
        x = Conv(64, 7, 2, 3, self.layout, self.dtype, name="conv1")(x)
        x = nn.relu(batch_norm(self.layout, self.dtype, self.train, "bn1")(x))
        x = max_pool(x, self.layout)
        blocks = iter(self.blocks or (Bottleneck,) * block_count())
        in_features = 64
        for stage, (width, count, stride) in enumerate(STAGES, start=1):
            for index in range(count):
                first = index == 0
                project = first and (stride != 1 or in_features != width * EXPANSION)
                x = next(blocks)(width, stride if first else 1, project, self.layout, self.dtype, self.train,
                                 name=f"layer{stage}_{index}")(x)
                in_features = width * EXPANSION
        x = jnp.mean(x, axis=spatial_axes(self.layout))
        fan_in = x.shape[-1]
        bound = 1.0 / math.sqrt(fan_in)
        bias_init = lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)  # noqa: E731
        logits = nn.Dense(self.num_classes, dtype=self.dtype, param_dtype=jnp.float32, kernel_init=linear_init,
                          bias_init=bias_init, name="fc")(x)
        return logits.astype(jnp.float32)


def block_count() -> int:
    """The bottleneck blocks of ResNet-50 (16)."""
    return sum(count for _, count, _ in STAGES)


def from_torchvision(state_dict: dict, num_classes: int = 1000) -> tuple[dict, dict]:
    """(params, batch_stats) of this model from a torchvision resnet50 state_dict (numpy arrays)."""
    def conv(name):
        return {"kernel": np.asarray(state_dict[f"{name}.weight"]).transpose(2, 3, 1, 0)}  # OIHW -> HWIO

    def bn(name):
        return ({"scale": np.asarray(state_dict[f"{name}.weight"]), "bias": np.asarray(state_dict[f"{name}.bias"])},
                {"mean": np.asarray(state_dict[f"{name}.running_mean"]), "var": np.asarray(state_dict[f"{name}.running_var"])})

    params: dict = {"conv1": conv("conv1")}
    stats: dict = {}
    params["bn1"], stats["bn1"] = bn("bn1")
    for stage, (_, count, _) in enumerate(STAGES, start=1):
        for index in range(count):
            ours, theirs = f"layer{stage}_{index}", f"layer{stage}.{index}"
            p, s = {}, {}
            for j in (1, 2, 3):
                p[f"conv{j}"] = conv(f"{theirs}.conv{j}")
                p[f"bn{j}"], s[f"bn{j}"] = bn(f"{theirs}.bn{j}")
            if f"{theirs}.downsample.0.weight" in state_dict:
                p["downsample_conv"] = conv(f"{theirs}.downsample.0")
                p["downsample_bn"], s["downsample_bn"] = bn(f"{theirs}.downsample.1")
            params[ours], stats[ours] = p, s
    params["fc"] = {"kernel": np.asarray(state_dict["fc.weight"]).T, "bias": np.asarray(state_dict["fc.bias"])}
    return params, stats


class ResNet50Part:
    """ResNet-50 v1.5 in flax.linen (torchvision layout: stride on 3x3, no conv bias, BN eps 1e-5 momentum 0.1)"""

    #: the record's api.classifier: the classifier precision policy of every backend's ResNet-50
    classifier = ("fc computes in the compute dtype (float16/bfloat16 under mixed precision), logits cast to float32 "
                  "for the loss: flax.linen.Dense(dtype=the compute dtype), then .astype(float32)")

    def build(self, p: ResNet50Params, ctx: BuildContext) -> ResNet50:
        """The model in the run's layout and compute dtype, each of its 16 bottleneck blocks through ctx.block
        (`nn.remat` under recompute: blocks); the trainer initialises it from the seed."""
        layout = "NHWC" if ctx.layout == "channels_last" else "NCHW"
        blocks = tuple(ctx.block(Bottleneck) for _ in range(block_count()))
        return ResNet50(p.num_classes, layout, compute_dtype(ctx.precision), blocks, train=True)


#: resnet50_train's model part for JAX (JaxBackend.parts)
PART = ResNet50Part()
