"""The JAX backend's declarations and hooks: answered without importing JAX, as the core asks them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

from conftest import PLUGIN, ROOT  # noqa: E402

from harness.errors import OutOfMemory, Unsupported  # noqa: E402
from harness.seam.backend import available_backends, resolve_backend_name  # noqa: E402
from harness_jax import NO_CUDA_GRAPH, NO_GRAPH_MODE, TF32_ON_CPU, JaxBackend  # noqa: E402


def test_importing_the_backend_imports_no_framework():
    code = (
        "import sys, harness_jax as b; b.JaxBackend().unsupported_reason('gemm', {}, 'cpu'); "
        "b.JaxBackend().unsupported_reason('resnet50_train', {'execution': 'default'}, 'cpu'); "
        "bad = [m for m in ('jax', 'jaxlib', 'flax', 'optax', 'torch', 'tensorflow') if m in sys.modules]; "
        "assert not bad, bad"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGIN)])}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)


def test_the_core_finds_the_plugin_through_its_entry_point_or_harness_backends(monkeypatch):
    from importlib.metadata import entry_points

    installed = any(ep.name == "jax" for ep in entry_points(group="harness.backends"))
    if not installed:  # not pip-installed: the development route the GPU image uses
        monkeypatch.setenv("HARNESS_BACKENDS", "jax=harness_jax:JaxBackend")
    backend = available_backends()[resolve_backend_name("JAX")]
    assert isinstance(backend, JaxBackend) and "jax" in available_backends()
    assert backend.installed() and backend.framework_version()


def test_declares_every_neutral_technique():
    backend = JaxBackend()
    assert backend.name == "jax"
    assert backend.workloads["gemm"]["precision"] == ("fp32", "tf32", "fp16", "bf16")
    # a training workload's techniques are derived from its part, which the backend carries for ResNet-50
    assert "resnet50_train" not in backend.workloads
    assert backend.part_target("resnet50_train") == "harness_jax.resnet50:PART"
    training = backend.techniques("resnet50_train")
    assert training["precision"] == ("fp32", "tf32", "amp_fp16", "amp_bf16")
    assert training["memory_format"] == ("channels_first", "channels_last")
    assert training["recompute"] == ("none", "blocks")
    # `default` (what JAX users train with: the jitted step) for training; a matrix product has no default path
    assert training["execution"] == ("eager", "graph", "cuda_graph", "compiled", "default")
    assert "default" not in backend.workloads["gemm"]["execution"]
    assert "does not declare execution: default" in backend.unsupported_reason(
        "gemm", {"execution": "default"}, "cpu")
    assert backend.validate_options({}) == {}
    with pytest.raises(ValueError, match="unknown option"):
        backend.validate_options({"compile_mode": "default"})


@pytest.mark.parametrize("workload", ["gemm", "resnet50_train"])
def test_graph_and_cuda_graph_are_unsupported_with_their_reasons(workload):
    backend = JaxBackend()
    assert backend.unsupported_reason(workload, {"execution": "graph"}, "cuda:0") == NO_GRAPH_MODE
    assert backend.unsupported_reason(workload, {"execution": "cuda_graph"}, "cuda:0") == NO_CUDA_GRAPH
    assert "jax.jit" in NO_GRAPH_MODE and "command buffers" in NO_CUDA_GRAPH
    assert backend.unsupported_reason(workload, {"execution": "compiled"}, "cuda:0") is None
    assert backend.unsupported_reason(workload, {"execution": "eager"}, "cpu") is None


def test_tf32_is_unsupported_on_the_cpu_and_keras_v1_everywhere():
    backend = JaxBackend()
    assert backend.unsupported_reason("gemm", {"precision": "tf32"}, "cpu") == TF32_ON_CPU
    assert backend.unsupported_reason("gemm", {"precision": "tf32"}, "cuda:0") is None
    assert "keras_resnet50_v1" in backend.unsupported_reason("resnet50_train", {"model": "keras_resnet50_v1"}, "cpu")


def test_workers_do_not_preallocate_unless_the_user_says_so(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    assert JaxBackend().worker_env({})["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "XLA_FLAGS" not in JaxBackend().worker_env({})
    # a capacity probe skips XLA's autotuning sweeps, keeping the user's flags
    assert JaxBackend().worker_env({}, probe=True)["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_gpu_autotune_level=0"
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    assert JaxBackend().worker_env({})["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"


def test_xla_resource_exhausted_is_out_of_memory_with_its_evidence():
    backend = JaxBackend()

    class XlaRuntimeError(RuntimeError):  # jaxlib's class, by name: its module moved between releases
        pass

    error = XlaRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 25.00GiB.")
    assert backend.out_of_memory(error) == (
        "XlaRuntimeError naming 'RESOURCE_EXHAUSTED': RESOURCE_EXHAUSTED: Out of memory while trying to allocate 25.00GiB."
    )
    try:  # jit re-raises: the evidence is found down the chain
        raise ValueError("while running the step") from error
    except ValueError as wrapped:
        assert "RESOURCE_EXHAUSTED" in backend.out_of_memory(wrapped)
    assert backend.out_of_memory(MemoryError()) == "MemoryError: "
    assert backend.out_of_memory(OutOfMemory("batch too large"))
    assert backend.out_of_memory(Unsupported("out of memory is not this")) is None
    assert backend.out_of_memory(ValueError("INVALID_ARGUMENT: shapes do not match")) is None


def test_jaxs_own_runtime_error_for_an_exhausted_allocator_is_oom_in_the_core():
    # a real allocation failure cannot be provoked on the CPU: XLA's CPU allocator aborts the process
    from jax.errors import JaxRuntimeError

    from harness.worker.execute import classify

    error = JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 51380224 bytes.")
    status, evidence = classify(error, JaxBackend())
    assert status == "oom" and evidence.startswith("JaxRuntimeError naming 'RESOURCE_EXHAUSTED'")
    assert classify(JaxRuntimeError("INVALID_ARGUMENT: bad shapes"), JaxBackend()) == ("failed", None)
