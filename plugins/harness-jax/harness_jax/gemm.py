"""gemm on JAX: jnp.matmul of the neutral operands, op by op (eager) or under jax.jit (compiled).

The operands are placed on the device as float32 and cast there to the precision's dtype, as the other
backends do; the check reads them back as multiplied.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from harness.seam.adapter import Prepared
from harness.workloads.base import fingerprint
from harness.workloads.gemm import check_product, gemm_inputs, sample_rows
from harness_jax.device import set_matmul_precision

#: The dtype the operands are multiplied in, per neutral precision (tf32: float32 through TF32 tensor cores).
DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def product(a, b):
    """The timed operation: one matrix product (batched when the operands are 3-D), output allocated."""
    return jnp.matmul(a, b)


def prepare(p, device, run) -> Prepared:
    """The operands on the device in the precision's dtype, and a step of one product in the execution mode."""
    dtype = DTYPES[p.precision]
    api = {"precision": f"{dtype} operands; " + set_matmul_precision(p.precision, device.jax)}
    a_host, b_host = gemm_inputs(p, run.seed)
    a = device.put(a_host).astype(dtype)
    b = device.put(b_host).astype(dtype)
    del a_host, b_host
    batched = " (batched)" if p.batch > 1 else ""
    api["operation"] = f"jnp.matmul(a, b){batched} (output allocated)"
    if p.execution == "compiled":
        # a fresh function per run, so its compile cache (timing.compilations) counts this run's compiles only
        call = jax.jit(lambda a, b: product(a, b))
        api["execution"] = "jax.jit(jnp.matmul) of one product per step"
    else:  # eager (graph and cuda_graph are refused by the backend before this is reached)
        call = product
        api["execution"] = "eager: jnp.matmul dispatched as one op per step (no user jax.jit)"
    result: dict = {}

    def step():
        result["c"] = call(a, b)
        device.hold(result["c"])

    def checks() -> dict:
        """Sampled rows of the last product against float64, from the operands as multiplied."""
        rows = sample_rows(p.dims[0], run.seed)
        a_used = np.asarray(a.astype(jnp.float32))
        b_used = np.asarray(b.astype(jnp.float32))
        c = result["c"][0] if p.batch > 1 else result["c"]
        c_rows = np.asarray(c[jnp.asarray(rows)].astype(jnp.float32))
        first = (lambda t: t[0]) if p.batch > 1 else (lambda t: t)
        out = check_product(first(a_used), first(b_used), c_rows, rows, p.precision)
        # the operands as they reached the device (after the cast), read back: equal on two backends
        # means they multiplied the same numbers
        out["inputs_fingerprint"] = fingerprint(a_used, b_used)
        return out

    def timing_fields() -> dict:
        size = getattr(call, "_cache_size", None)
        return {"compilations": size() if callable(size) else None}

    return Prepared(step=step, api=api, checks=checks, timing_fields=timing_fields)
