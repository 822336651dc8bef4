"""gemm on JAX, in-process on the CPU: correct products in every precision it maps, the same operands as
every backend, each execution mode naming its API."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from helpers import execute, make_spec  # noqa: E402

from harness.errors import Unsupported  # noqa: E402
from harness.workloads.base import fingerprint  # noqa: E402
from harness.workloads.gemm import GemmParams, gemm_inputs  # noqa: E402
from harness_jax import gemm as jax_gemm  # noqa: E402

SMALL = {"m": 96, "n": 64, "k": 80, "batch": 2}


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("execution", ["eager", "compiled"])
def test_gemm_is_correct_on_the_cpu(precision, execution):
    result = execute(make_spec("gemm", {**SMALL, "precision": precision, "execution": execution}))
    assert result["status"] == "ok", result.get("error")
    checks = result["checks"]
    assert checks["correct"] is True and checks["max_rel_error"] <= checks["tolerance"]
    assert len(result["samples"]) == 2 and all(s > 0 for s in result["samples"])
    assert result["tflops"] == pytest.approx(float(np.median(result["samples"])))
    assert result["api"]["precision"] == (f"{jax_gemm.DTYPES[precision]} operands; "
                                          "jax.config.update('jax_default_matmul_precision', 'highest')")
    assert result["api"]["sync"].startswith("jax.block_until_ready")
    assert result["device"] == "cpu" and result["framework_version"]
    if execution == "compiled":
        assert result["api"]["execution"].startswith("jax.jit(jnp.matmul)")
        assert result["timing"]["compilations"] == 1  # first step, warm-up and blocks: one compile
    else:
        assert result["api"]["execution"].startswith("eager: jnp.matmul")


def test_fp32_operands_are_the_neutral_ones_and_fp16_operands_are_them_rounded():
    params = {**SMALL, "precision": "fp32"}
    result = execute(make_spec("gemm", params))
    a, b = gemm_inputs(GemmParams(**params), 0)
    assert result["checks"]["inputs_fingerprint"] == fingerprint(a, b)
    half = execute(make_spec("gemm", {**params, "precision": "fp16"}))
    rounded = (a.astype(np.float16).astype(np.float32), b.astype(np.float16).astype(np.float32))
    assert half["checks"]["inputs_fingerprint"] == fingerprint(*rounded)


def test_a_wrong_product_is_failed_and_keeps_its_figures(monkeypatch):
    import jax.numpy as jnp

    monkeypatch.setattr(jax_gemm, "product", lambda a, b: jnp.matmul(a, b) + 1.0)
    result = execute(make_spec("gemm", {"size": 64}))
    assert result["status"] == "failed" and result["error"].startswith("wrong result:")
    assert len(result["samples"]) == 2 and result["tflops"] > 0


def test_tf32_on_the_cpu_is_unsupported_with_the_resolved_device_in_the_record():
    from harness.worker.execute import execute as worker_execute

    fields = worker_execute(make_spec("gemm", {"size": 32, "precision": "tf32"}, device="auto")).to_dict()
    assert fields["status"] == "unsupported" and "TF32 is a tensor-core format" in fields["error"]
    assert fields["device"] == "cpu"


def test_a_gpu_jax_does_not_see_is_unsupported_and_auto_falls_back_to_the_cpu():
    with pytest.raises(Unsupported, match=r"JAX sees 0 GPUs"):
        execute(make_spec("gemm", {"size": 32}, device="cuda:3"))
    result = execute(make_spec("gemm", {"size": 32}, device="auto"))
    assert result["device"] == "cpu" and result["device_name"]
    env = result["env"]
    assert env["jax"] == result["framework_version"] and env["flax"] and env["optax"]
    assert env["default_matmul_precision"] == "highest" and env["enable_x64"] is False
    assert result["peak_allocated_bytes"] is None  # XLA's CPU client keeps no allocator statistics
