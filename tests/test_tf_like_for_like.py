"""TensorFlow's side of like for like (docs/execution.md, "Fairness points"), on the CPU in either Keras generation.

ResNet-50's 3x3 and 7x7 convolutions pad inside the convolution (PaddedConv2D), as torch's do, and compute the
same function as the ZeroPadding2D + 'valid' Conv2D they replace, forward and backward, eagerly, in a graph and
under XLA; the whole model still computes torchvision's logits with its weights in every mode and keeps its
25,557,032 parameters. The classifier computes in the policy's compute dtype and its logits reach the loss in
float32. `loss_scale: static` is a constant scale with no finite check in both Keras generations.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("TensorFlow is not installed", allow_module_level=True)

import tensorflow as tf  # noqa: E402

from backends.tensorflow import compat  # noqa: E402
from backends.tensorflow import resnet50 as tf_resnet  # noqa: E402
from backends.tensorflow import train as tf_train  # noqa: E402
from harness.workloads.resnet50_train import parameter_count  # noqa: E402
from harness.workloads.training import STATIC_LOSS_SCALE  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
keras = compat.keras


def padded_then_valid(kernel: np.ndarray, stride: int, padding: int, data_format: str):
    """The layers the model used before: ZeroPadding2D, then a 'valid' bias-free Conv2D holding `kernel`."""
    conv = keras.layers.Conv2D(kernel.shape[-1], kernel.shape[0], strides=stride, padding="valid", use_bias=False,
                               data_format=data_format)
    pad = keras.layers.ZeroPadding2D(padding, data_format=data_format)
    return lambda x: conv(pad(x)), conv


def run(mode: str, fn, x):
    """`fn(x)` and its gradient with respect to x, eagerly, in a tf.function, or under XLA."""

    def forward_backward(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = fn(t)
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, t)

    if mode != "eager":
        forward_backward = tf.function(forward_backward, jit_compile=mode == "xla")
    return [t.numpy() for t in forward_backward(x)]


@pytest.mark.parametrize("kernel_size,stride,padding", [(3, 1, 1), (3, 2, 1), (7, 2, 3)])
@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
def test_a_convolution_padded_inside_the_op_computes_what_zero_padding_then_a_valid_conv_did(kernel_size, stride,
                                                                                            padding, mode):
    compat.set_global_policy("float32")
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((2, 11, 11, 3)).astype(np.float32))
    ours = tf_resnet.PaddedConv2D(4, kernel_size, stride, padding, data_format="channels_last")
    ours.build(x.shape)
    kernel = rng.standard_normal((kernel_size, kernel_size, 3, 4)).astype(np.float32)
    ours.set_weights([kernel])
    before, conv = padded_then_valid(kernel, stride, padding, "channels_last")
    conv.build((None, 11 + 2 * padding, 11 + 2 * padding, 3))
    conv.set_weights([kernel])
    (y_new, g_new), (y_old, g_old) = run(mode, ours, x), run(mode, before, x)
    assert y_new.shape == y_old.shape
    # the same sums in another order: equal to float32 rounding of the largest value
    np.testing.assert_allclose(y_new, y_old, rtol=0, atol=1e-6 * np.abs(y_old).max())
    np.testing.assert_allclose(g_new, g_old, rtol=0, atol=1e-6 * np.abs(g_old).max())


def test_the_nchw_padded_convolution_computes_the_nhwc_one_transposed_under_xla():
    # NCHW convolutions run on the CPU under XLA (TensorFlow's own CPU kernels take NHWC only)
    compat.set_global_policy("float32")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 9, 9, 3)).astype(np.float32)
    kernel = rng.standard_normal((3, 3, 3, 5)).astype(np.float32)
    layers = {}
    for data_format in ("channels_last", "channels_first"):
        layer = tf_resnet.PaddedConv2D(5, 3, 2, 1, data_format=data_format)
        layer.build((2, 9, 9, 3) if data_format == "channels_last" else (2, 3, 9, 9))
        layer.set_weights([kernel])
        layers[data_format] = layer
    nhwc, _ = run("xla", layers["channels_last"], tf.constant(x))
    nchw, _ = run("xla", layers["channels_first"], tf.constant(x.transpose(0, 3, 1, 2)))
    np.testing.assert_allclose(nchw.transpose(0, 2, 3, 1), nhwc, rtol=0, atol=1e-6 * np.abs(nhwc).max())


def test_resnet50_pads_only_its_max_pool_in_a_separate_op_and_keeps_its_parameter_count():
    compat.set_global_policy("float32")
    model = tf_resnet.build_resnet50(64, 1000, "channels_last")
    assert tf_train.trainable_parameters(model) == 25_557_032 == parameter_count(1000)
    layers = [layer for sub in (model.stem, *model.blocks, model.head) for layer in sub.layers]
    assert [layer.name for layer in layers if isinstance(layer, keras.layers.ZeroPadding2D)] == ["pool_pad"]
    padded = [layer for layer in layers if isinstance(layer, tf_resnet.PaddedConv2D) and layer.padding]
    assert len(padded) == 1 + 16  # the stem's 7x7 and each bottleneck's 3x3


@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_resnet50_computes_torchvisions_logits_with_its_weights_outside_xla_too(execution):
    # tests/test_tf_backend.py holds the same under XLA in both layouts; here the modes in which a pad op used
    # to run as its own kernel. torch is imported first, in its own process (TF 2.12 before torch 2.0 can hang)
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    code = ("import torch, torchvision, json; from tests.test_tf_backend import max_logit_difference_from_torchvision "
            f"as d; print(json.dumps(d('channels_last', 64, {execution!r})))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    assert json.loads(out.strip().splitlines()[-1]) < 1e-4


@pytest.mark.parametrize("policy,compute", [("mixed_float16", "float16"), ("mixed_bfloat16", "bfloat16")])
def test_the_classifier_computes_in_the_compute_dtype_and_hands_float32_logits_to_the_loss(policy, compute):
    compat.set_global_policy(policy)
    try:
        model = tf_resnet.build_resnet50(32, 10, "channels_last")
        assert model.head.get_layer("fc").compute_dtype == compute
        logits = model(tf.zeros((1, 32, 32, 3)), training=False)
        assert logits.dtype == tf.float32
    finally:
        compat.set_global_policy("float32")
    assert "compute dtype" in tf_resnet.PART.classifier


def test_static_loss_scaling_is_a_constant_scale_without_a_finite_check():
    compat.set_global_policy("float32")
    variable = tf.Variable([1.0, 1.0])
    update = compat.optimizer_update(keras.optimizers.SGD(0.5), [variable], loss_scaling="static")
    assert float(update.scale(tf.constant(2.0))) == 2.0 * STATIC_LOSS_SCALE
    assert compat.loss_scale_value(update.optimizer) == STATIC_LOSS_SCALE
    assert "static" in update.api or "dynamic=False" in update.api
    # the gradients of the scaled loss are unscaled, and a non-finite one is applied, not skipped
    update.apply([tf.constant([2.0 * STATIC_LOSS_SCALE, math.inf])], [variable])
    after = variable.numpy()
    assert after[0] == pytest.approx(0.0) and not math.isfinite(after[1])
    assert compat.loss_scale_value(update.optimizer) == STATIC_LOSS_SCALE  # a constant: no back-off


def test_dynamic_loss_scaling_still_skips_a_non_finite_step():
    compat.set_global_policy("float32")
    variable = tf.Variable([1.0, 1.0])
    update = compat.optimizer_update(keras.optimizers.SGD(0.5), [variable], loss_scaling="dynamic")
    before = compat.loss_scale_value(update.optimizer)
    update.apply([tf.constant([1.0, math.inf])], [variable])
    assert variable.numpy().tolist() == [1.0, 1.0] and compat.loss_scale_value(update.optimizer) < before
