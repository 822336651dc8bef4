"""gemm on torch: C = A @ B with the shared operands, timed eagerly, as a CUDA graph, or compiled."""

from __future__ import annotations

from typing import Any

from harness import stats
from harness.errors import Unsupported
from harness.measure import run_timed
from harness.workloads import get_workload
from harness.workloads.base import fingerprint
from harness.workloads.gemm import check_product, gemm_flops, gemm_inputs, sample_rows

from backends.torch import CUDA_GRAPH_ON_CPU, compat, device as devices, precision as precisions

#: Products captured in one CUDA graph (one replay = one timed step) unless options say otherwise.
GRAPH_PRODUCTS = 16
#: Untimed products on a side stream before capture (cuBLAS picks its kernels and workspace there).
GRAPH_WARMUP = 3


def product(a, b, out=None):
    """The timed operation: torch.matmul (batched for 3-D operands), written into `out` where given."""
    import torch

    return torch.matmul(a, b, out=out)


def run(spec: dict, ctx) -> dict:
    """Execute one gemm spec on torch and return its record fields (see docs/architecture.md)."""
    import torch

    p = get_workload("gemm").validate(spec["params"])
    options = spec.get("options") or {}
    seed = int(spec.get("seed", 0))
    neutral = devices.resolve_device(spec.get("device", "auto"))
    device = devices.torch_device(neutral)
    execution = p.execution

    if execution == "graph" and device.type != "cuda":
        raise Unsupported(CUDA_GRAPH_ON_CPU)
    api: dict[str, str] = {"precision": "", "execution": ""}
    flags = precisions.apply_tf32(p.precision, device)
    dtype = precisions.torch_dtype(precisions.GEMM_DTYPE[p.precision])
    reason = compat.matmul_supported(dtype, device)
    if reason:
        raise Unsupported(reason)
    api["precision"] = f"{dtype} operands; {flags}"

    a_np, b_np = gemm_inputs(p, seed)
    inputs_fingerprint = fingerprint(a_np, b_np)
    a = torch.from_numpy(a_np).to(device=device, dtype=dtype)
    b = torch.from_numpy(b_np).to(device=device, dtype=dtype)
    del a_np, b_np
    out = torch.empty(a.shape[:-1] + (b.shape[-1],), device=device, dtype=dtype)
    result: dict[str, Any] = {"c": out}

    products_per_step = 1
    if execution == "eager":
        api["execution"] = "eager: torch.matmul(a, b, out=c)"

        def step():
            product(a, b, out)

    elif execution == "graph":
        products_per_step = int(options.get("graph_products", GRAPH_PRODUCTS))
        api["execution"] = f"torch.cuda.CUDAGraph({products_per_step} x torch.matmul(a, b, out=c)), replayed"
        graph: list = []

        def step():
            if not graph:  # capture inside the first (separately reported) step, like a compile
                graph.append(_capture(lambda: product(a, b, out), products_per_step))
            graph[0].replay()

    elif execution == "compiled":
        mode = str(options.get("compile_mode", "default"))
        compiled = compat.torch_compile(product, mode=mode)
        api["execution"] = f"torch.compile(mode={mode}): torch.matmul(a, b)"

        def step():
            result["c"] = compiled(a, b)

    else:  # the params model admits no other value
        raise Unsupported(f"execution {execution!r} is not mapped by the torch backend")

    flops = gemm_flops(p)
    clock = devices.clock_for(device)
    devices.reset_peak_memory(device)
    timing = run_timed(
        step,
        clock,
        spec.get("measure") or {},
        work_per_step=flops * products_per_step / 1e12,
        telemetry=ctx.telemetry_for(neutral),
    )
    peak = devices.peak_allocated_bytes(device)
    c = result["c"]
    samples = timing.rates(flops * products_per_step / 1e12)

    # correctness from the operands as they were multiplied (rounded to fp16/bf16 where used)
    m = p.dims[0]
    rows = sample_rows(m, seed)
    rows_t = torch.from_numpy(rows).to(device)
    first = (lambda t: t[0]) if p.batch > 1 else (lambda t: t)
    checks = check_product(
        first(a).float().cpu().numpy(),
        first(b).float().cpu().numpy(),
        first(c).index_select(0, rows_t).float().cpu().numpy(),
        rows,
        p.precision,
    )
    checks["inputs_fingerprint"] = inputs_fingerprint

    timing_out = timing.fields(products_per_step=products_per_step)
    timing_out.update(devices.probe_launch_bound(step, device, timing, execution, ctx))

    median = stats.median(samples)
    record: dict[str, Any] = {
        **devices.identity(neutral, device),
        "api": api,
        "samples": samples,
        "step_time_s": timing.step_time_s() / products_per_step,
        "first_step_s": timing.first_step_s,
        "peak_allocated_bytes": peak,
        "tflops": median,
        "checks": checks,
        "timing": timing_out,
    }
    if not checks["correct"]:
        record["status"] = "failed"
        record["error"] = f"wrong result: max_rel_error {checks['max_rel_error']:.3g} > tolerance {checks['tolerance']:.3g}"
    return record


def _capture(work, count: int):
    """A CUDA graph of `count` calls of `work`, captured after warm-up calls on a side stream."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP):
            work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(count):
            work()
    return graph
