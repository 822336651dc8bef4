"""GEMM: C = A @ B for (batched) m x k by k x n matrices, the same numbers on every backend."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from harness.workloads.base import Execution, Params, Workload

GemmPrecision = Literal["fp32", "tf32", "fp16", "bf16"]

#: Largest accepted max_rel_error per precision. The error is |C - C_ref| / (|A| @ |B|) on sampled
#: rows, so it measures rounding, not cancellation. fp32's bound is tight enough to catch TF32 being
#: used by mistake (TF32 rounds inputs to 10 mantissa bits: errors near 1e-3).
TOLERANCE: dict[str, float] = {"fp32": 1e-4, "tf32": 1e-2, "fp16": 1e-2, "bf16": 3e-2}


class GemmParams(Params):
    """Parameters of the gemm workload. `size` sets m = n = k where they are not given."""

    size: int | None = Field(None, ge=1, le=65536)
    m: int | None = Field(None, ge=1, le=65536)
    n: int | None = Field(None, ge=1, le=65536)
    k: int | None = Field(None, ge=1, le=65536)
    batch: int = Field(1, ge=1, le=4096)
    precision: GemmPrecision = "fp32"
    execution: Execution = "eager"

    @model_validator(mode="after")
    def _dims(self):
        if self.size is None and None in (self.m, self.n, self.k):
            raise ValueError("give `size` (square) or all of `m`, `n`, `k`")
        return self

    @property
    def dims(self) -> tuple[int, int, int]:
        """(m, n, k) after `size` has filled what was not given."""
        return (self.m or self.size, self.n or self.size, self.k or self.size)  # type: ignore[return-value]


def gemm_flops(p: GemmParams) -> float:
    m, n, k = p.dims
    return 2.0 * m * n * k * p.batch


def gemm_inputs(p: GemmParams, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The float32 operands every backend multiplies: standard normal, from the scenario's seed."""
    m, n, k = p.dims
    rng = np.random.default_rng(seed)
    shape_a = (p.batch, m, k) if p.batch > 1 else (m, k)
    shape_b = (p.batch, k, n) if p.batch > 1 else (k, n)
    return rng.standard_normal(shape_a, dtype=np.float32), rng.standard_normal(shape_b, dtype=np.float32)


def check_product(a: np.ndarray, b: np.ndarray, c_rows: np.ndarray, rows: np.ndarray, precision: str) -> dict:
    """Compare sampled rows of a product with a float64 reference; the `checks` of a gemm record.

    `a` and `b` are the operands as the backend used them (already rounded to fp16/bf16 where it
    multiplies in that precision, converted back to float32); `c_rows` the backend's output rows
    `rows` (of the first batch entry). The error is normalized by |A| @ |B| so it is scale-free.
    """
    a0 = a[0] if a.ndim == 3 else a
    b0 = b[0] if b.ndim == 3 else b
    a64 = a0[rows].astype(np.float64)
    b64 = b0.astype(np.float64)
    ref = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    err = np.abs(c_rows.astype(np.float64) - ref) / np.maximum(scale, np.finfo(np.float64).tiny)
    max_rel = float(err.max()) if err.size else 0.0
    tol = TOLERANCE[precision]
    return {"max_rel_error": max_rel, "tolerance": tol, "correct": bool(np.isfinite(max_rel) and max_rel <= tol)}


def sample_rows(m: int, seed: int, count: int = 8) -> np.ndarray:
    """Which output rows the correctness check looks at (the same rows on every backend)."""
    rng = np.random.default_rng(seed + 1)
    return np.sort(rng.choice(m, size=min(count, m), replace=False))


def product_verdict(checks: dict, p: GemmParams) -> tuple[str | None, str | None]:
    """`failed` when the sampled rows of the product are wrong beyond the precision's tolerance."""
    if checks.get("correct") is False:
        return "failed", (f"wrong result: max_rel_error {checks['max_rel_error']:.3g} exceeds the {p.precision} "
                          f"tolerance {checks['tolerance']:.3g}")
    return None, None


GEMM = Workload(
    name="gemm",
    description="dense matrix product C = A @ B; headline TFLOP/s (2*m*n*k*batch FLOPs per product)",
    params_model=GemmParams,
    metric="tflops",
    unit="TFLOP/s",
    flops_per_step=gemm_flops,
    items_per_step=lambda p: 1.0,
    peak_precision=lambda p: p.precision,
    verdict=product_verdict,
    technique_baselines={"precision": "fp32", "execution": "eager"},
    x_param="size",
    plots=("tflops_vs_peak",),
)
