"""gemm on torch: C = A @ B with the shared operands, one product per step, eager, as a CUDA graph, or compiled.

Every mode allocates its output, as tf.linalg.matmul does (torch's caching allocator and TF's BFC
allocator both hand a freed block back without a device allocation).
"""

from __future__ import annotations

import torch

from backends.torch import compat
from backends.torch import precision as precisions
from harness.errors import Unsupported
from harness.seam.adapter import Prepared
from harness.workloads.base import fingerprint
from harness.workloads.gemm import check_product, gemm_inputs, sample_rows

#: Untimed products on a side stream before a CUDA graph is captured (cuBLAS picks kernels and workspace).
GRAPH_WARMUP = 3


def product(a, b):
    """The timed operation: torch.matmul (batched for 3-D operands), output allocated."""
    return torch.matmul(a, b)


def prepare(p, device, run) -> Prepared:
    """The operands on the device in the precision's dtype, and a step of one product in the execution mode."""
    dev = device.torch
    flags = precisions.apply_tf32(p.precision, dev)
    dtype = precisions.torch_dtype(precisions.GEMM_DTYPE[p.precision])
    reason = compat.matmul_supported(dtype, dev)
    if reason:
        raise Unsupported(reason)
    api = {"precision": f"{dtype} operands; {flags}", "operation": "torch.matmul(a, b) (output allocated)"}

    a_np, b_np = gemm_inputs(p, run.seed)
    a = torch.from_numpy(a_np).to(device=dev, dtype=dtype)
    b = torch.from_numpy(b_np).to(device=dev, dtype=dtype)
    del a_np, b_np
    result: dict = {}

    if p.execution == "eager":
        api["execution"] = "eager: one torch.matmul per step"

        def step():
            result["c"] = product(a, b)

    elif p.execution == "cuda_graph":
        api["execution"] = "torch.cuda.CUDAGraph of one torch.matmul, replayed once per step"
        graph: list = []

        def step():
            if not graph:  # capture inside the first (separately reported) step, like a compile
                graph.append(_capture(lambda: product(a, b), result))
            graph[0].replay()

    else:  # compiled (the backend refuses `graph` before this is reached)
        mode = run.options["compile_mode"]
        compiled = compat.torch_compile(product, mode=mode)
        api["execution"] = f"torch.compile(mode={mode}) of torch.matmul(a, b)"

        def step():
            result["c"] = compiled(a, b)

    def checks() -> dict:
        """Sampled rows of the last product against float64, from the operands as multiplied."""
        rows = sample_rows(p.dims[0], run.seed)
        rows_t = torch.from_numpy(rows).to(dev)
        first = (lambda t: t[0]) if p.batch > 1 else (lambda t: t)
        a_used, b_used = a.float().cpu().numpy(), b.float().cpu().numpy()
        out = check_product(first(a_used), first(b_used), first(result["c"]).index_select(0, rows_t).float().cpu().numpy(),
                            rows, p.precision)
        # the operands as they reached the device (after the cast), read back: equal on two backends
        # means they multiplied the same numbers
        out["inputs_fingerprint"] = fingerprint(a_used, b_used)
        return out

    return Prepared(step=step, api=api, checks=checks)


def _capture(work, result: dict):
    """A CUDA graph of one call of `work` (its output kept in result["c"]), captured after warm-up on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP):
            work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result["c"] = work()
    return graph
