"""gemm on TensorFlow: tf.linalg.matmul of the neutral operands, timed, then checked against float64.

Run on the CPU with TF 2.12 and 2.21, and on an H200 with TF 2.21: the operands live on /GPU:N and
the clock's sync_devices() waits for the queued products.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from backends.tensorflow import device
from backends.tensorflow.step import build_step
from harness.seam.adapter import Prepared
from harness.workloads.base import fingerprint
from harness.workloads.gemm import check_product, gemm_inputs, sample_rows

#: The TensorFlow dtype the operands are multiplied in, per neutral precision.
DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _product(a, b):
    """The timed operation: one matrix product (batched when the operands are 3-D)."""
    return tf.linalg.matmul(a, b)


def prepare(params, dev, run) -> Prepared:
    """The operands on the device in the precision's dtype, and a step of one product in the execution mode."""
    placement = dev.placement
    dtype = DTYPES[params.precision]
    api = {"precision": f"{dtype} operands; " + device.set_tensor_float_32(params.precision, placement)}

    a_host, b_host = gemm_inputs(params, run.seed)
    with tf.device(placement.tf_name):
        a = tf.cast(tf.constant(a_host), dtype)
        b = tf.cast(tf.constant(b_host), dtype)
    del a_host, b_host

    step_fn = build_step(_product, params.execution)
    api["execution"] = step_fn.api + " of one product per step"
    api["operation"] = "tf.linalg.matmul(a, b)" + (" (batched)" if params.batch > 1 else "") + " (output allocated)"
    last = {}

    def step():
        # every call runs the product: eager ops and tf.function calls are never cached by value
        last["c"] = step_fn.call(a, b)

    def checks() -> dict:
        out = _check(a, b, last["c"], params, run.seed)
        # the operands as they reached the device (after the cast), read back: equal on two backends
        # means they multiplied the same numbers
        out["inputs_fingerprint"] = fingerprint(tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy())
        traces = step_fn.traces()
        if traces is not None and traces > 1:
            run.ctx.warnings.append(f"the tf.function step traced {traces} times (expected once)")
        return out

    return Prepared(step=step, api=api, checks=checks, timing_fields=lambda: {"traces": step_fn.traces()})


def _check(a, b, c, params, seed: int) -> dict:
    """check_product on the operands as multiplied (rounded to fp16/bf16 where used) and sampled output rows."""
    m = params.dims[0]
    rows = sample_rows(m, seed)
    first = (lambda t: t[0]) if params.batch > 1 else (lambda t: t)
    a_used = tf.cast(first(a), tf.float32).numpy()
    b_used = tf.cast(first(b), tf.float32).numpy()
    c_rows = tf.cast(tf.gather(first(c), rows), tf.float32).numpy()
    return check_product(a_used, b_used, c_rows.astype(np.float32), rows, params.precision)
