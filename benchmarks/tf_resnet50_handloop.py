#!/usr/bin/env python
"""A minimal hand-written TensorFlow ResNet-50 v1.5 training loop: the yardstick for harness's TF overhead.

What a careful person would write by hand and nothing more: ResNet-50 v1.5 as torchvision lays it out
(stride on the 3x3 conv, no conv bias, BatchNorm eps 1e-5), built as one functional Keras model; SGD
with momentum; synthetic data resident on the device; a custom step (GradientTape, float32 logits,
loss scaling for amp_fp16) in tf.function, with XLA when asked; warm-up, then `repeats` blocks of
`steps` steps, each closed by tf.test.experimental.sync_devices(). TF32 is set explicitly from the
precision. It does not import harness. Prints one JSON line:

    {"images_per_s": <median over repeats>, "samples": [...], "first_step_s": ..., ...}

Compare with `harness run` on the same settings (resnet50_train, channels_last, execution graph or
compiled): the two should agree within 3% (docs/benchmarks.md, "How a figure is checked").
Keras 2 instead of Keras 3: run it with TF_USE_LEGACY_KERAS=1 and tf_keras installed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--precision", choices=("fp32", "tf32", "amp_bf16", "amp_fp16"), default="tf32")
    parser.add_argument("--execution", choices=("graph", "compiled"), default="compiled")
    parser.add_argument("--channels-first", action="store_true", help="NCHW (default NHWC, TensorFlow's native layout)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--device", default="/GPU:0", help="a TensorFlow device name (/GPU:0, /CPU:0)")
    return parser.parse_args(argv)


def build(keras, image_size: int, num_classes: int, data_format: str):
    """ResNet-50 v1.5, torchvision's layout, one functional model returning float32 logits."""
    axis = 1 if data_format == "channels_first" else -1
    L = keras.layers

    def conv(x, filters, kernel, stride=1):
        if kernel > 1:
            x = L.ZeroPadding2D(kernel // 2, data_format=data_format)(x)
        return L.Conv2D(filters, kernel, strides=stride, use_bias=False, data_format=data_format)(x)

    def bn(x):
        return L.BatchNormalization(axis=axis, epsilon=1e-5, momentum=0.9)(x)

    shape = (3, image_size, image_size) if data_format == "channels_first" else (image_size, image_size, 3)
    inputs = keras.Input(shape=shape)
    x = L.ReLU()(bn(conv(inputs, 64, 7, 2)))
    x = L.ZeroPadding2D(1, data_format=data_format)(x)
    x = L.MaxPooling2D(3, strides=2, data_format=data_format)(x)
    channels = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = L.ReLU()(bn(conv(x, width, 1)))
            y = L.ReLU()(bn(conv(y, width, 3, s)))
            y = bn(conv(y, width * 4, 1))
            shortcut = bn(conv(x, width * 4, 1, s)) if i == 0 and (s != 1 or channels != width * 4) else x
            x = L.ReLU()(L.Add()([y, shortcut]))
            channels = width * 4
    x = L.GlobalAveragePooling2D(data_format=data_format)(x)
    outputs = L.Dense(num_classes, dtype="float32")(x)
    return keras.Model(inputs, outputs)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import numpy as np
    import tensorflow as tf

    keras = tf.keras
    keras3 = int(str(getattr(keras, "__version__", "2")).split(".")[0]) >= 3
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.experimental.enable_tensor_float_32_execution(args.precision == "tf32")
    policy = {"amp_bf16": "mixed_bfloat16", "amp_fp16": "mixed_float16"}.get(args.precision, "float32")
    keras.mixed_precision.set_global_policy(policy)
    data_format = "channels_first" if args.channels_first else "channels_last"

    with tf.device(args.device):
        model = build(keras, args.image_size, args.num_classes, data_format)
        rng = np.random.default_rng(0)
        shape = (args.batch_size, 3, args.image_size, args.image_size)
        images = rng.standard_normal(shape, dtype=np.float32)
        if data_format == "channels_last":
            images = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
        images = tf.constant(images)
        labels = tf.constant(rng.integers(0, args.num_classes, size=(args.batch_size,), dtype=np.int64))
        variables = model.trainable_variables
        if keras3:
            optimizer = keras.optimizers.SGD(learning_rate=args.lr, momentum=args.momentum)
            if args.precision == "amp_fp16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            optimizer.build(variables)
            scale = optimizer.scale_loss if args.precision == "amp_fp16" else (lambda loss: loss)

            def apply(grads):
                optimizer.apply(grads, variables)
        else:
            optimizer = keras.optimizers.SGD(learning_rate=args.lr, momentum=args.momentum, jit_compile=False)
            if args.precision == "amp_fp16":
                optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
            scale = optimizer.get_scaled_loss if args.precision == "amp_fp16" else (lambda loss: loss)

            def apply(grads):
                if args.precision == "amp_fp16":
                    grads = optimizer.get_unscaled_gradients(grads)
                optimizer.apply_gradients(zip(grads, variables))

        @tf.function(jit_compile=args.execution == "compiled")
        def step(x, y):
            with tf.GradientTape() as tape:
                logits = tf.cast(model(x, training=True), tf.float32)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
                scaled = scale(loss)
            apply(tape.gradient(scaled, variables))
            return loss

        sync = tf.test.experimental.sync_devices
        t0 = time.perf_counter()
        loss = step(images, labels)
        sync()
        first = time.perf_counter() - t0
        for _ in range(args.warmup):
            loss = step(images, labels)
        sync()
        samples = []
        for _ in range(args.repeats):
            sync()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                loss = step(images, labels)
            sync()
            samples.append(args.batch_size * args.steps / (time.perf_counter() - t0))
    try:
        peak = int(tf.config.experimental.get_memory_info(args.device.lstrip("/"))["peak"])
    except (ValueError, KeyError):
        peak = None
    report = {
        "images_per_s": statistics.median(samples),
        "samples": samples,
        "first_step_s": first,
        "clock": "perf_counter after tf.test.experimental.sync_devices()",
        "loss_last": float(loss.numpy()),
        "peak_allocated_bytes": peak,
        "trainable_parameters": int(sum(int(np.prod(v.shape)) for v in variables)),
        "settings": vars(args),
        "tensorflow": tf.__version__,
        "keras": str(getattr(keras, "__version__", "?")),
    }
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
