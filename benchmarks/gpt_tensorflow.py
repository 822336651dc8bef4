#!/usr/bin/env python
"""A hand-written TensorFlow custom training loop for GPT-2: the yardstick for harness's gpt_train on TensorFlow.

The model harness trains (backends.tensorflow.gpt, built with the Keras in use: Keras 3, or tf_keras with
TF_USE_LEGACY_KERAS=1), Keras's AdamW at lr 6e-4, betas (0.9, 0.95), epsilon 1e-8, weight decay 0.1 on the
weights of 2+ dimensions (exclude_from_weight_decay the others), no clipping; one batch of synthetic tokens
on the device; the Keras mixed-precision policy for amp_bf16 / amp_fp16 (LossScaleOptimizer for fp16); the
step under tf.GradientTape in tf.function, with XLA (`--compile`: jit_compile=True) or without. Warm-up, then
`repeats` blocks of `steps` steps, each ended by reading the loss back. Prints one JSON line:

    {"tokens_per_s": <median over repeats>, "samples": [...], ...}

Compare with `harness run transformer --backend tensorflow --set execution=graph` (or compiled with
--compile) at the same sizes: on a GPU the two should agree within 2%.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpt_torch import gpt_params  # noqa: E402  (the same arguments: --compile is XLA here)
from gpt_torch import parse_args as torch_args  # noqa: E402


def main(argv=None) -> dict:
    args = torch_args(argv)
    args.xla = args.compile
    import tensorflow as tf

    from backends.tensorflow import compat
    from backends.tensorflow.gpt import PART
    from backends.tensorflow.step import cross_entropy
    from harness.workloads.gpt_train import synthetic_batch
    from harness.workloads.training import BuildContext

    p = gpt_params(args)
    tf.config.experimental.enable_tensor_float_32_execution(args.precision == "tf32")
    keras = compat.keras
    keras.mixed_precision.set_global_policy({"amp_bf16": "mixed_bfloat16", "amp_fp16": "mixed_float16"}
                                            .get(args.precision, "float32"))
    keras.utils.set_random_seed(args.seed)
    model = PART.build(p, BuildContext(seed=args.seed, framework=keras, precision=args.precision))
    variables = model.trainable_variables
    optimizer = keras.optimizers.AdamW(learning_rate=6e-4, weight_decay=0.1, beta_1=0.9, beta_2=0.95, epsilon=1e-8)
    optimizer.exclude_from_weight_decay(var_list=[v for v in variables if len(v.shape) < 2])
    if args.precision == "amp_fp16":
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    ids, targets = (tf.constant(a) for a in synthetic_batch(p, args.seed))
    scaled = args.precision == "amp_fp16"

    @tf.function(jit_compile=args.xla)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = cross_entropy(model(x, training=True), y)
            objective = optimizer.scale_loss(loss) if scaled and hasattr(optimizer, "scale_loss") else (
                optimizer.get_scaled_loss(loss) if scaled else loss)
        grads = tape.gradient(objective, variables)
        if scaled and hasattr(optimizer, "get_unscaled_gradients"):
            grads = optimizer.get_unscaled_gradients(grads)
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    for _ in range(args.warmup):
        loss = step(ids, targets)
    float(loss)
    samples = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step(ids, targets)
        float(loss)  # the block ends when the last step's loss is on the host
        samples.append(args.batch_size * args.seq_len * args.steps / (time.perf_counter() - t0))
    report = {"tokens_per_s": statistics.median(samples), "samples": samples, "loss_last": float(loss),
              "clock": "perf_counter after reading the loss back", "settings": vars(args),
              "tensorflow": tf.__version__, "keras": compat.keras_api()}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
