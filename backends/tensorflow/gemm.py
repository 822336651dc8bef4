"""gemm on TensorFlow: tf.linalg.matmul of the neutral operands, timed, then checked against float64.

Run on the CPU with TF 2.12 and 2.21. On a GPU the same code places the operands on /GPU:N and the
clock's sync_devices() waits for the queued products; that path is not yet run on a GPU.
"""

from __future__ import annotations

import numpy as np

from harness import stats
from harness.backend import RunContext
from harness.measure import run_timed
from harness.workloads.base import fingerprint
from harness.workloads.gemm import GEMM, check_product, gemm_flops, gemm_inputs, sample_rows

from backends.tensorflow import compat, device

#: The TensorFlow dtype the operands are multiplied in, per neutral precision.
DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _product(a, b):
    """The timed operation: one matrix product (batched when the operands are 3-D)."""
    import tensorflow as tf

    return tf.linalg.matmul(a, b)


def run(spec: dict, ctx: RunContext) -> dict:
    """Time the product as spec["measure"] asks and check sampled rows of the last one computed."""
    return device.run_placed(spec, ctx, GEMM.validate(spec["params"]), _run)


def _run(spec: dict, ctx: RunContext, params, placement: device.Placement) -> dict:
    tf = compat.tf_module()
    seed = int(spec.get("seed") or 0)
    dtype = DTYPES[params.precision]
    api = {"precision": f"{dtype} operands; " + device.set_tensor_float_32(params.precision, placement)}

    a_host, b_host = gemm_inputs(params, seed)
    inputs_fingerprint = fingerprint(a_host, b_host)
    with tf.device(placement.tf_name):
        a = tf.cast(tf.constant(a_host), dtype)
        b = tf.cast(tf.constant(b_host), dtype)
    del a_host, b_host

    step = device.build_step(_product, params.execution)
    api["execution"] = step.api
    api["operation"] = "tf.linalg.matmul" + (" (batched)" if params.batch > 1 else "")
    clock, api["sync"] = device.clock()

    last = {}

    def one_product():
        # every call runs the product: eager ops and tf.function calls are never cached by value
        last["c"] = step.call(a, b)

    flops = gemm_flops(params)
    peak = device.AllocatorPeak(placement)
    peak.reset()
    with tf.device(placement.tf_name):
        timing = run_timed(
            one_product, clock, spec["measure"], work_per_step=flops, telemetry=ctx.telemetry_for(placement.neutral)
        )
    peak_bytes = peak.peak_bytes()

    samples = [rate / 1e12 for rate in timing.rates(flops)]
    checks = _check(a, b, last["c"], params, seed)
    checks["inputs_fingerprint"] = inputs_fingerprint
    traces = step.traces()
    if traces is not None and traces > 1:
        ctx.warnings.append(f"the tf.function step traced {traces} times (expected once)")

    result = {
        **device.identity(placement),
        "api": api,
        "samples": samples,
        "step_time_s": timing.step_time_s(),
        "first_step_s": timing.first_step_s,
        "peak_allocated_bytes": peak_bytes,
        "tflops": stats.median(samples),
        "checks": checks,
        "timing": timing.fields(traces=traces),
    }
    if not checks["correct"]:
        result["status"] = "failed"
        result["error"] = (
            f"wrong result: max_rel_error {checks['max_rel_error']:.3g} exceeds the {params.precision} "
            f"tolerance {checks['tolerance']:.3g}"
        )
    return result


def _check(a, b, c, params, seed: int) -> dict:
    """check_product on the operands as multiplied (rounded to fp16/bf16 where used) and sampled output rows."""
    import tensorflow as tf

    m = params.dims[0]
    rows = sample_rows(m, seed)
    first = (lambda t: t[0]) if params.batch > 1 else (lambda t: t)
    a_used = tf.cast(first(a), tf.float32).numpy()
    b_used = tf.cast(first(b), tf.float32).numpy()
    c_rows = tf.cast(tf.gather(first(c), rows), tf.float32).numpy()
    return check_product(a_used, b_used, c_rows.astype(np.float32), rows, params.precision)
