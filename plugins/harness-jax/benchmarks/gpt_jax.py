#!/usr/bin/env python
"""A hand-written JAX training loop for GPT-2: the yardstick for harness's gpt_train on the JAX plugin.

The Flax model harness trains (harness_jax.gpt), optax.adamw at lr 6e-4, b1 0.9, b2 0.95, eps 1e-8, weight
decay 0.1 masked to the weights of 2+ dimensions, no clipping; one batch of synthetic tokens on the device;
the step (forward, float32 cross-entropy, jax.value_and_grad, the Optax update) under jax.jit with the state
donated; under amp_bf16 the layers compute in bfloat16 with float32 parameters. Warm-up, then `repeats`
blocks of `steps` steps, each ended by block_until_ready. Prints one JSON line:

    {"tokens_per_s": <median over repeats>, "samples": [...], ...}

Run from the repository root with the plugin on the path (`PYTHONPATH=.:plugins/harness-jax`); compare with
`harness run transformer --backend jax --set execution=compiled` at the same sizes: within 2% on a GPU.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from functools import partial

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks"), os.path.join(ROOT, "plugins", "harness-jax")]

from gpt_torch import gpt_params, parse_args  # noqa: E402  (the same arguments; nothing of torch is imported)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import jax
    import numpy as np
    import optax
    from harness_jax.gpt import PART
    from harness_jax.step import cross_entropy

    from harness.workloads.gpt_train import synthetic_batch
    from harness.workloads.training import BuildContext

    p = gpt_params(args)
    model = PART.build(p, BuildContext(seed=args.seed, framework=None, precision=args.precision))
    ids, targets = (jax.device_put(a.astype(np.int32)) for a in synthetic_batch(p, args.seed))
    params = jax.jit(model.init)(jax.random.PRNGKey(args.seed), ids[:1])["params"]
    optimizer = optax.adamw(6e-4, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1,
                            mask=partial(jax.tree_util.tree_map, lambda leaf: leaf.ndim >= 2))

    @partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda prm: cross_entropy(model.apply({"params": prm}, x), y))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    state = (params, optimizer.init(params))
    for _ in range(args.warmup):
        *state, loss = step(*state, ids, targets)
    loss.block_until_ready()
    samples = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            *state, loss = step(*state, ids, targets)
        loss.block_until_ready()
        samples.append(args.batch_size * args.seq_len * args.steps / (time.perf_counter() - t0))
    report = {"tokens_per_s": statistics.median(samples), "samples": samples, "loss_last": float(loss),
              "clock": "perf_counter after block_until_ready", "settings": vars(args), "jax": jax.__version__,
              "device": str(jax.devices()[0])}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
