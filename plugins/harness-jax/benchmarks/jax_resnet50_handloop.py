#!/usr/bin/env python
"""A minimal hand-written JAX ResNet-50 v1.5 training loop: the yardstick for harness's JAX overhead.

What a careful person would write by hand with Flax and Optax and nothing more: ResNet-50 v1.5 as
torchvision lays it out (stride on the 3x3 conv, no conv bias, BatchNorm eps 1e-5, momentum 0.1 in
torch's sense) from flax.linen.Conv / BatchNorm / Dense in Flax's own NHWC layout; optax.sgd with
momentum; synthetic data put on the device once; the whole step (forward, loss, backward, update) in
one jax.jit with the state donated; the first step (compile) timed alone, warm-up, then `repeats`
blocks of `steps` steps, each closed by jax.block_until_ready on the step's outputs. Matmul/conv
precision is set from --precision ("highest" for fp32, "tensorfloat32" for tf32). Same warm-up and
blocks as benchmarks/torch_resnet50_handloop.py. It does not import harness. Prints one JSON line:

    {"images_per_s": <median over repeats>, "samples": [...], "first_step_s": ..., ...}

Compare with `harness run` on the same settings (resnet50_train, memory_format channels_last,
execution compiled, --backend jax): the two should agree within 3%.
XLA_PYTHON_CLIENT_PREALLOCATE=false is set as harness sets it for its JAX workers, unless already set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--precision", choices=("fp32", "tf32", "amp_bf16", "amp_fp16"), default="fp32")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    return parser.parse_args(argv)


def build(nn, jnp, num_classes: int, dtype):
    """ResNet-50 v1.5 (torchvision's layout) from flax.linen layers, NHWC, float32 logits."""
    conv_init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")

    class Block(nn.Module):
        width: int
        stride: int
        project: bool

        @nn.compact
        def __call__(self, x):
            def conv(y, features, kernel, stride=1):
                pad = kernel // 2
                return nn.Conv(features, (kernel, kernel), (stride, stride), padding=((pad, pad), (pad, pad)),
                               use_bias=False, dtype=dtype, kernel_init=conv_init)(y)

            def bn(y):
                return nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=1e-5, dtype=dtype)(y)

            y = nn.relu(bn(conv(x, self.width, 1)))
            y = nn.relu(bn(conv(y, self.width, 3, self.stride)))
            y = bn(conv(y, self.width * 4, 1))
            shortcut = bn(conv(x, self.width * 4, 1, self.stride)) if self.project else x
            return nn.relu(y + shortcut)

    class ResNet50(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(64, (7, 7), (2, 2), padding=((3, 3), (3, 3)), use_bias=False, dtype=dtype,
                        kernel_init=conv_init)(x)
            x = nn.relu(nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=1e-5, dtype=dtype)(x))
            x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
            channels = 64
            for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for i in range(blocks):
                    s = stride if i == 0 else 1
                    x = Block(width, s, i == 0 and (s != 1 or channels != width * 4))(x)
                    channels = width * 4
            x = jnp.mean(x, axis=(1, 2)).astype(jnp.float32)
            return nn.Dense(num_classes, dtype=jnp.float32)(x)

    return ResNet50()


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    if args.device == "cpu":
        device = jax.devices("cpu")[0]
    else:
        index = int(args.device.split(":")[1]) if ":" in args.device else 0
        device = jax.devices("gpu")[index]
    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if args.precision == "tf32" else "highest")
    dtype = {"amp_bf16": jnp.bfloat16, "amp_fp16": jnp.float16}.get(args.precision, jnp.float32)
    scaling = args.precision == "amp_fp16"

    with jax.default_device(device):
        model = build(nn, jnp, args.num_classes, dtype)
        rng = np.random.default_rng(0)
        images = rng.standard_normal((args.batch_size, 3, args.image_size, args.image_size), dtype=np.float32)
        images = jax.device_put(np.ascontiguousarray(images.transpose(0, 2, 3, 1)), device)
        labels = jax.device_put(rng.integers(0, args.num_classes, size=(args.batch_size,)).astype(np.int32), device)
        variables = jax.jit(model.init)(jax.random.PRNGKey(0), images[:1])
        optimizer = optax.sgd(args.lr, momentum=args.momentum)
        params = variables["params"]
        state = (params, variables["batch_stats"], optimizer.init(params), jnp.float32(2.0**16 if scaling else 1.0))

    def loss_fn(params, batch_stats, scale, x, y):
        logits, updated = model.apply({"params": params, "batch_stats": batch_stats}, x, mutable=["batch_stats"])
        loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), y).mean()
        return loss * scale, (loss, updated["batch_stats"])

    def train_step(state, x, y):
        params, batch_stats, opt_state, scale = state
        (_, (loss, batch_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch_stats, scale, x, y)
        if scaling:  # dynamic loss scaling: skip the update and halve the scale on overflow
            grads = jax.tree_util.tree_map(lambda g: g / scale, grads)
            finite = jnp.all(jnp.array([jnp.isfinite(g).all() for g in jax.tree_util.tree_leaves(grads)]))
        updates, new_opt_state = optimizer.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        if scaling:
            pick = lambda a, b: jax.tree_util.tree_map(lambda n, o: jnp.where(finite, n, o), a, b)  # noqa: E731
            new_params, new_opt_state = pick(new_params, params), pick(new_opt_state, opt_state)
            scale = jnp.where(finite, scale, scale * 0.5)
        return (new_params, batch_stats, new_opt_state, scale), loss

    step = jax.jit(train_step, donate_argnums=(0,))

    t0 = time.perf_counter()
    state, loss = step(state, images, labels)
    jax.block_until_ready((state, loss))
    first = time.perf_counter() - t0
    for _ in range(args.warmup):
        state, loss = step(state, images, labels)
    jax.block_until_ready((state, loss))
    samples = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            state, loss = step(state, images, labels)
        jax.block_until_ready((state, loss))
        samples.append(args.batch_size * args.steps / (time.perf_counter() - t0))

    stats = device.memory_stats() or {}
    report = {
        "images_per_s": statistics.median(samples),
        "samples": samples,
        "first_step_s": first,
        "clock": "perf_counter after jax.block_until_ready(step outputs)",
        "loss_last": float(loss),
        "peak_allocated_bytes": stats.get("peak_bytes_in_use"),
        "trainable_parameters": int(sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(state[0]))),
        "settings": vars(args),
        "jax": jax.__version__,
        "device_name": device.device_kind if device.platform != "cpu" else "cpu",
    }
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
