"""The PyTorch backend, in-process: each technique maps to torch's API, runs or is unsupported with a reason.

Sizes are tiny (2 CPU cores): 32x32 images, batch 2, 1-2 steps, one torch thread (torch's OpenMP
threads spin badly when other processes share the cores). Tests marked `gpu` run only where torch
sees a GPU; `slow` marks the one torch.compile of ResNet-50 (about 45 s on 2 idle cores).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from backends.torch import TorchBackend  # noqa: E402
from harness.errors import OutOfMemory, Unsupported  # noqa: E402
from harness.seam.backend import RunContext  # noqa: E402
from harness.workloads.resnet50_train import parameter_count  # noqa: E402
from tests.specs import backend_spec, run_backend, run_handloop  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HAS_CUDA = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")

TORCH_VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
#: torch 2.0.x refuses torch.compile on Python 3.11+ (2.1 added it): there it must be Unsupported.
COMPILE_WORKS = not (TORCH_VERSION < (2, 1) and sys.version_info >= (3, 11))
#: float16 training on the CPU needs CPU float16 autocast (2.2) and torch.amp.GradScaler("cpu") (2.3).
CPU_FP16_TRAINING = TORCH_VERSION >= (2, 3)


def cpu_can_multiply(dtype) -> bool:
    """Whether this torch has a CPU matmul for dtype (torch 2.0 has none for float16)."""
    try:
        torch.ones(2, 2, dtype=dtype) @ torch.ones(2, 2, dtype=dtype)
        return True
    except RuntimeError:
        return False


TINY_MEASURE = {"warmup": 0, "steps": 1, "repeats": 2}
TINY_RESNET = {"batch_size": 2, "image_size": 32, "num_classes": 10}
ONE_STEP = {"warmup": 0, "steps": 1, "repeats": 1}  # the first step and one timed step


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_spec(workload: str, params: dict, measure: dict | None = None, *, device: str = "cpu", options=None) -> dict:
    """A spec as the worker hands it to a backend (docs/architecture.md), params validated and defaulted."""
    return backend_spec("torch", workload, params, measure or TINY_MEASURE, device=device, options=options)


def execute(spec: dict, ctx: RunContext | None = None) -> dict:
    return run_backend(TorchBackend(), spec, ctx)


def resnet(measure=None, device="cpu", **params) -> dict:
    return make_spec("resnet50_train", {**TINY_RESNET, **params}, measure, device=device)


# --- the plugin ----------------------------------------------------------------------------------


def test_importing_the_backend_does_not_import_torch():
    code = ("import sys, backends.torch as b; b.TorchBackend().unsupported_reason('resnet50_train', {}, 'cpu'); "
            "loaded = [m for m in ('torch', 'torchvision') if m in sys.modules]; assert not loaded, loaded")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_backend_declares_its_names_and_techniques():
    backend = TorchBackend()
    assert (backend.name, backend.aliases, backend.distributions) == ("torch", ("pytorch",), ("torch",))
    assert backend.workloads["gemm"]["precision"] == ("fp32", "tf32", "fp16", "bf16")
    assert backend.techniques("resnet50_train")["recompute"] == ("none", "blocks")
    assert backend.techniques("resnet50_train")["execution"] == ("eager", "graph", "cuda_graph", "compiled", "default")
    assert backend.installed()
    assert backend.validate_options({}) == {"compile_mode": "default"}
    with pytest.raises(ValueError, match="keras: unknown option"):
        backend.validate_options({"keras": "tf_keras"})


def test_known_impossible_combinations_are_refused_before_torch_is_imported():
    backend = TorchBackend()
    assert "TF32" in backend.unsupported_reason("gemm", {"precision": "tf32"}, "cpu")
    assert "CUDA graph" in backend.unsupported_reason("gemm", {"execution": "cuda_graph"}, "cpu")
    assert "GradScaler" in backend.unsupported_reason(
        "resnet50_train", {"precision": "amp_fp16", "execution": "cuda_graph"}, "cuda:0"
    )
    assert "BatchNorm cannot train on a batch of one" in backend.unsupported_reason(
        "resnet50_train", {"batch_size": 1}, "cpu")
    assert backend.unsupported_reason("gemm", {"precision": "tf32"}, "cuda:0") is None


# --- gemm ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_gemm_is_correct_on_cpu(precision):
    spec = make_spec("gemm", {"size": 64, "precision": precision}, {"warmup": 1, "steps": 2, "repeats": 3})
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    if not cpu_can_multiply(dtype):  # then, and only then, it is unsupported with torch's reason
        with pytest.raises(Unsupported, match="matmul on the CPU"):
            execute(spec)
        return
    result = execute(spec)
    assert result.get("status", "ok") == "ok"
    assert result["checks"]["correct"] is True
    assert result["checks"]["max_rel_error"] <= result["checks"]["tolerance"]
    assert len(result["samples"]) == 3 and all(s > 0 for s in result["samples"])
    assert result["tflops"] == pytest.approx(sorted(result["samples"])[1])
    assert result["api"]["precision"].startswith(str(dtype))
    assert result["device"] == "cpu" and result["framework_version"] == torch.__version__
    assert result["peak_allocated_bytes"] is None  # no CPU allocator peak in torch; the worker reads RSS
    assert "peak_reserved_bytes" not in result["checks"]  # nor a reserved one: absent, never a made-up figure


def test_batched_gemm_is_correct_and_counts_every_product():
    spec = make_spec("gemm", {"m": 16, "n": 24, "k": 8, "batch": 3}, {"warmup": 0, "steps": 2, "repeats": 2})
    result = execute(spec)
    assert result["checks"]["correct"] is True
    flops = 2 * 16 * 24 * 8 * 3
    for sample, wall in zip(result["samples"], result["timing"]["block_wall_s"]):
        assert sample == pytest.approx(flops * 2 / wall / 1e12)


def test_gemm_fp32_turns_tf32_off_explicitly():
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    result = execute(make_spec("gemm", {"size": 32, "precision": "fp32"}))
    assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False
    assert "allow_tf32=False" in result["api"]["precision"]
    assert result["env"]["cuda_matmul_allow_tf32"] is False and result["env"]["float32_matmul_precision"] == "highest"


def test_gemm_tf32_is_unsupported_on_cpu():
    with pytest.raises(Unsupported, match="TF32 is a tensor-core format"):
        execute(make_spec("gemm", {"size": 32, "precision": "tf32"}))


def test_gemm_cuda_graph_is_unsupported_on_cpu():
    with pytest.raises(Unsupported, match="CUDA graph"):
        execute(make_spec("gemm", {"size": 32, "execution": "cuda_graph"}))


@pytest.mark.parametrize("workload", ["gemm", "resnet50_train"])
def test_torch_has_no_graph_mode_and_says_which_modes_cover_the_step(workload):
    params = {"size": 32} if workload == "gemm" else TINY_RESNET
    with pytest.raises(Unsupported, match="torch has no `graph` mode.*cuda_graph.*compiled"):
        execute(make_spec(workload, {**params, "execution": "graph"}))


def test_gemm_with_a_corrupted_product_fails_and_keeps_its_figures(monkeypatch):
    from backends.torch import gemm

    real = gemm.product

    def corrupted(a, b):
        return real(a, b).mul_(1.01)  # 1% off: far beyond fp32's 1e-4

    monkeypatch.setattr(gemm, "product", corrupted)
    result = execute(make_spec("gemm", {"size": 64, "precision": "fp32"}))
    assert result["status"] == "failed"
    assert result["checks"]["correct"] is False
    assert result["error"].startswith("wrong result: max_rel_error ")
    assert f"fp32 tolerance {result['checks']['tolerance']:.3g}" in result["error"]
    assert len(result["samples"]) == 2  # measured figures are kept


def test_gemm_compiled_runs_and_names_torch_compile_in_api():
    eager = execute(make_spec("gemm", {"size": 32}))
    if not COMPILE_WORKS:
        with pytest.raises(Unsupported, match="torch.compile on Python"):
            execute(make_spec("gemm", {"size": 32, "execution": "compiled"}))
        return
    compiled = execute(make_spec("gemm", {"size": 32, "execution": "compiled"}))
    assert compiled["checks"]["correct"] is True
    assert compiled["api"]["execution"].startswith("torch.compile(mode=default)")
    assert eager["checks"]["inputs_fingerprint"] == compiled["checks"]["inputs_fingerprint"]
    assert eager["api"]["execution"].startswith("eager")
    assert compiled["api"]["execution"] != eager["api"]["execution"]


def test_missing_gpu_is_unsupported_and_says_how_many_torch_sees():
    count = torch.cuda.device_count() if HAS_CUDA else 0
    with pytest.raises(Unsupported, match=f"torch sees {count} GPU"):
        execute(make_spec("gemm", {"size": 32}, device=f"cuda:{count + 3}"))


def test_auto_device_resolves_to_the_first_gpu_or_the_cpu():
    result = execute(make_spec("gemm", {"size": 32}, device="auto"))
    assert result["device"] == ("cuda:0" if HAS_CUDA else "cpu")
    assert result["device_name"]


# --- resnet50_train ------------------------------------------------------------------------------


def test_resnet50_has_25557032_parameters_at_1000_classes():
    result = execute(resnet(num_classes=1000, measure=ONE_STEP))
    assert result["checks"]["model_parameters"] == 25_557_032 == parameter_count(1000)


def test_resnet50_reports_finite_losses_and_one_sample_per_repeat():
    result = execute(resnet(measure={"warmup": 0, "steps": 1, "repeats": 3}))
    assert result.get("status", "ok") == "ok"
    assert len(result["samples"]) == 3
    checks = result["checks"]
    assert math.isfinite(checks["loss_first"]) and math.isfinite(checks["loss_last"])
    assert checks["loss_first"] != checks["loss_last"]  # the optimizer stepped
    assert checks["model_parameters"] == parameter_count(10)
    assert result["step_time_s"] > 0 and result["first_step_s"] > 0
    assert result["tflops"] > 0
    assert set(result["api"]) >= {"precision", "memory_format", "recompute", "execution", "grad_accum"}


def test_resnet50_channels_last_puts_model_and_input_in_channels_last(monkeypatch):
    import torchvision.models.resnet as tv_resnet

    seen = []
    real = tv_resnet.ResNet._forward_impl

    def spy(self, x):
        cl = torch.channels_last
        seen.append((x.is_contiguous(memory_format=cl), self.conv1.weight.is_contiguous(memory_format=cl)))
        return real(self, x)

    monkeypatch.setattr(tv_resnet.ResNet, "_forward_impl", spy)
    result = execute(resnet(memory_format="channels_last", measure=ONE_STEP))
    assert "channels_last" in result["api"]["memory_format"]
    assert seen and all(x and w for x, w in seen)
    seen.clear()
    execute(resnet(memory_format="channels_first", measure=ONE_STEP))
    assert seen and not any(x or w for x, w in seen)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "amp_bf16", "amp_fp16"])
def test_every_resnet_precision_runs_or_is_unsupported_with_a_reason(monkeypatch, precision):
    import torch.nn.functional as F

    logits_dtypes = []
    real = F.cross_entropy

    def spy(logits, labels, *args, **kwargs):
        logits_dtypes.append(logits.dtype)
        return real(logits, labels, *args, **kwargs)

    monkeypatch.setattr(F, "cross_entropy", spy)
    try:
        result = execute(resnet(precision=precision, measure=ONE_STEP))
    except Unsupported as exc:
        assert str(exc), "an unsupported combination must say why"
        assert precision == "tf32" or (precision == "amp_fp16" and not CPU_FP16_TRAINING), str(exc)
        if precision == "tf32":
            assert "TF32" in str(exc)
        return
    assert precision != "tf32", "TF32 cannot run on the CPU"
    assert result.get("status", "ok") == "ok"
    assert math.isfinite(result["checks"]["loss_last"])
    api = result["api"]["precision"]
    expected_api = {"fp32": "allow_tf32=False", "amp_bf16": "torch.autocast(cpu, bfloat16)", "amp_fp16": "GradScaler"}
    assert expected_api[precision] in api
    assert result["api"]["execution"] == "eager"
    # the classifier's output shows whether autocast was really on
    expected_dtype = {"fp32": torch.float32, "amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}[precision]
    assert logits_dtypes and all(dtype == expected_dtype for dtype in logits_dtypes)
    # GradScaler's scale after the timed steps, as TensorFlow's and JAX's records give theirs; none without it
    if precision == "amp_fp16":
        assert result["timing"]["loss_scale"] >= 1
    else:
        assert "loss_scale" not in result["timing"]


def test_resnet_cuda_graph_is_unsupported_on_cpu_even_when_auto_resolves_there():
    with pytest.raises(Unsupported, match="CUDA graph needs a CUDA GPU"):
        execute(resnet(execution="cuda_graph"))
    if not HAS_CUDA:  # asked again in the worker once `auto` is the CPU
        with pytest.raises(Unsupported, match="CUDA graph needs a CUDA GPU"):
            execute(resnet(execution="cuda_graph", device="auto"))


@pytest.mark.slow
@pytest.mark.skipif(not COMPILE_WORKS, reason="torch.compile needs torch 2.1+ on Python 3.11+")
def test_resnet_compiled_compiles_the_whole_step_with_the_optimizer(monkeypatch):
    compiled = []
    real = torch.compile

    def spy(fn, *args, **kwargs):
        compiled.append(fn.__name__)
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", spy)
    result = execute(resnet(execution="compiled", measure=ONE_STEP))
    assert compiled == ["train_step"]  # the step (zero_grad, forward, loss, backward, optimizer.step), not the model
    assert result["api"]["execution"].startswith("torch.compile(mode=default) of the whole step")
    assert math.isfinite(result["checks"]["loss_last"])
    assert result["first_step_s"] > result["step_time_s"]  # compilation lands in the first step


@pytest.mark.slow
@pytest.mark.skipif(not COMPILE_WORKS, reason="torch.compile needs torch 2.1+ on Python 3.11+")
def test_resnet_compiled_reduce_overhead_compiles_the_model_and_marks_each_step(monkeypatch):
    """CUDA-graph modes compile the model, not the step: a compiled SGD step that read the backward graph's
    outputs failed on an H200 (torch 2.11, 2026-11-30: "accessing tensor output of CUDAGraphs that has been
    overwritten"). On the CPU inductor skips the CUDA graphs; what is compiled and marked is the same."""
    compiled, marks = [], []
    real = torch.compile

    def spy(fn, *args, **kwargs):
        compiled.append((type(fn).__name__, kwargs.get("mode")))
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", spy)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    spec = backend_spec("torch", "resnet50_train", {**TINY_RESNET, "execution": "compiled"}, ONE_STEP, device="cpu",
                        options={"compile_mode": "reduce-overhead"})
    result = execute(spec)
    assert compiled == [("ResNet", "reduce-overhead")]
    assert result["api"]["execution"].startswith("torch.compile(model, mode=reduce-overhead)")
    assert "optimizer.step() eager" in result["api"]["execution"]
    assert len(marks) >= 2  # the first step and the timed one
    assert math.isfinite(result["checks"]["loss_last"])


def test_grad_accum_under_a_cuda_graph_compile_mode_is_unsupported_with_the_reason():
    spec = backend_spec("torch", "resnet50_train", {**TINY_RESNET, "execution": "compiled", "grad_accum": 2}, ONE_STEP,
                        device="cpu", options={"compile_mode": "reduce-overhead"})
    if not COMPILE_WORKS:
        pytest.skip("torch.compile needs torch 2.1+ on Python 3.11+")
    with pytest.raises(Unsupported, match="grad_accum > 1 under torch.compile mode 'reduce-overhead'"):
        execute(spec)


@pytest.mark.parametrize("recompute, calls_per_forward", [("blocks", 16), ("none", 0)])
def test_recompute_blocks_checkpoints_every_bottleneck(monkeypatch, recompute, calls_per_forward):
    import torch.utils.checkpoint as ckpt

    calls = []
    real = ckpt.checkpoint

    def counting(fn, *args, **kwargs):
        calls.append(kwargs.get("use_reentrant"))
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(ckpt, "checkpoint", counting)
    result = execute(resnet(recompute=recompute, measure=ONE_STEP))
    forwards = 2  # the first step and one timed step
    assert len(calls) == calls_per_forward * forwards  # 3 + 4 + 6 + 3 Bottleneck blocks
    assert all(flag is False for flag in calls)
    assert math.isfinite(result["checks"]["loss_last"])
    if recompute == "blocks":
        assert result["api"]["recompute"].startswith("torch.utils.checkpoint.checkpoint(use_reentrant=False) per Bottleneck")
    else:
        assert result["api"]["recompute"] == "none"


def test_grad_accum_2_runs_two_micro_batches_and_counts_their_images(monkeypatch):
    import torch.nn.functional as F

    calls = []
    real = F.cross_entropy
    monkeypatch.setattr(F, "cross_entropy", lambda *a, **k: calls.append(1) or real(*a, **k))
    result = execute(resnet(grad_accum=2, measure={"warmup": 0, "steps": 1, "repeats": 2}))
    assert len(calls) == 2 * 3  # two micro-batches in each of 3 steps (first + 2 timed)
    images_per_step = 2 * TINY_RESNET["batch_size"]
    for sample, wall in zip(result["samples"], result["timing"]["block_wall_s"]):
        assert sample == pytest.approx(images_per_step / wall)
    assert result["timing"]["images_per_step"] == images_per_step
    assert "2 micro-batches" in result["api"]["grad_accum"]


def test_non_finite_loss_is_reported_as_diverged(monkeypatch):
    import torch.nn.functional as F

    real = F.cross_entropy
    monkeypatch.setattr(F, "cross_entropy", lambda *a, **k: real(*a, **k) * float("nan"))
    result = execute(resnet())
    assert result["status"] == "diverged"
    assert "non-finite loss" in result["error"]
    assert len(result["samples"]) == 2


def test_keras_resnet50_v1_is_unsupported_on_torch():
    with pytest.raises(Unsupported, match="torchvision's ResNet-50 v1.5"):
        execute(resnet(model="keras_resnet50_v1"))


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "CUDA out of memory. Tried to allocate 2.00 GiB",
        "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes",
        "[enforce fail at CPUAllocator.cpp:68] . DefaultCPUAllocator: not enough memory: you tried to allocate 8 bytes",
    ],
)
def test_allocation_failures_are_out_of_memory_with_their_evidence(message):
    evidence = TorchBackend().out_of_memory(RuntimeError(message))
    assert evidence and evidence.startswith("RuntimeError naming") and message.splitlines()[0][:40] in evidence


def test_onednn_allocation_failures_are_out_of_memory_only_under_a_host_memory_limit(monkeypatch):
    # seen at the edge of a capacity search under --memory-limit on the CPU: the backward's oneDNN primitive
    # could not be created for want of memory; without a limit the same words are some other failure
    error = RuntimeError("could not create a primitive")
    monkeypatch.delenv("HARNESS_MEMORY_LIMIT_BYTES", raising=False)
    assert TorchBackend().out_of_memory(error) is None
    monkeypatch.setenv("HARNESS_MEMORY_LIMIT_BYTES", str(3 * 2**29))
    assert "could not create a primitive" in TorchBackend().out_of_memory(error)


def test_torch_and_host_oom_types_are_out_of_memory():
    backend = TorchBackend()
    assert backend.out_of_memory(torch.cuda.OutOfMemoryError("planted")).endswith("planted")
    if hasattr(torch, "OutOfMemoryError"):
        assert backend.out_of_memory(torch.OutOfMemoryError("planted"))
    assert backend.out_of_memory(MemoryError())
    assert backend.out_of_memory(OutOfMemory("planted"))
    try:  # torch.compile wraps the original error; the cause still counts
        try:
            raise RuntimeError("CUDA out of memory")
        except RuntimeError as inner:
            raise ValueError("backend compiler failed") from inner
    except ValueError as wrapped:
        assert "CUDA out of memory" in backend.out_of_memory(wrapped)
    assert backend.out_of_memory(RuntimeError("shape mismatch")) is None


# --- CUDA (skipped without a GPU) ----------------------------------------------------------------


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
@pytest.mark.parametrize("execution", ["eager", "cuda_graph"])
def test_gemm_on_cuda_is_correct_and_times_with_events(precision, execution):
    spec = make_spec("gemm", {"size": 512, "precision": precision, "execution": execution},
                     {"warmup": 2, "steps": 5, "repeats": 3, "profile": True}, device="cuda:0")
    try:
        result = execute(spec)
    except Unsupported as exc:
        assert precision == "tf32" and "8.0" in str(exc)
        return
    assert result["checks"]["correct"] is True
    assert all(d is not None and d > 0 for d in result["timing"]["block_device_s"])
    assert result["checks"]["peak_reserved_bytes"] >= result["peak_allocated_bytes"] > 0
    assert result["profile"]["busy_s"] > 0 and result["profile"]["classes_s"]["matmul"] > 0


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("execution", ["eager", "cuda_graph"])
@pytest.mark.parametrize("precision", ["fp32", "amp_bf16", "amp_fp16"])
def test_resnet_on_cuda_runs_each_execution_or_says_why(execution, precision):
    spec = resnet(precision=precision, execution=execution, memory_format="channels_last", device="cuda:0",
                  measure={"warmup": 1, "steps": 2, "repeats": 2, "profile": True})
    ctx = RunContext()
    try:
        result = execute(spec, ctx)
    except Unsupported as exc:
        assert (execution, precision) == ("cuda_graph", "amp_fp16") and "GradScaler" in str(exc)
        return
    assert math.isfinite(result["checks"]["loss_first"]) and math.isfinite(result["checks"]["loss_last"])
    assert result["peak_allocated_bytes"] > 0
    profile = result["profile"]
    assert profile["busy_s"] > 0 and isinstance(profile["host_bound"], bool)
    assert any(w.startswith("launch-bound") for w in ctx.warnings) == profile["host_bound"]
    assert result["api"]["execution"].startswith({"eager": "eager", "cuda_graph": "torch.cuda.CUDAGraph"}[execution])


@pytest.mark.gpu
@needs_gpu
def test_resnet_graph_with_recompute_and_grad_accum_runs_on_cuda():
    spec = resnet(precision="amp_bf16", execution="cuda_graph", recompute="blocks", grad_accum=2, device="cuda:0",
                  measure={"warmup": 1, "steps": 2, "repeats": 2})
    result = execute(spec)
    assert math.isfinite(result["checks"]["loss_last"])
    assert result["checks"]["loss_first"] != result["checks"]["loss_last"]


# --- the hand-written yardstick ------------------------------------------------------------------


def test_handloop_benchmark_prints_images_per_second_without_harness():
    report = run_handloop("torch_resnet50_handloop.py", [
        "--device", "cpu", "--batch-size", "2", "--image-size", "32", "--steps", "1", "--warmup", "0",
        "--repeats", "2", "--num-classes", "10"], env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert report["images_per_s"] > 0 and len(report["samples"]) == 2


def _sgd_and_step(prime: bool):
    """A tiny model, SGD with momentum as the backend builds it, and its whole training step."""
    from backends.torch.optimizer import momentum_buffers_ready

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    api = {"optimizer": "torch.optim.SGD"}
    if prime:
        momentum_buffers_ready(optimizer, api)
    images, labels = torch.randn(2, 3, 8, 8), torch.tensor([1, 3])

    def step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(images), labels).backward()
        optimizer.step()

    return net, step, api


def test_momentum_buffers_made_ready_train_exactly_as_sgds_own_first_step():
    (plain, plain_step, _), (primed, primed_step, api) = _sgd_and_step(False), _sgd_and_step(True)
    assert "compiles once" in api["optimizer"]
    for _ in range(3):
        plain_step()
        primed_step()
    for a, b in zip(plain.parameters(), primed.parameters()):
        assert torch.equal(a, b)  # bit for bit: zeros * momentum + grad is the gradient


@pytest.mark.skipif(not COMPILE_WORKS, reason="torch.compile needs torch 2.1+ on Python 3.11+")
def test_with_momentum_buffers_ready_the_compiled_step_is_traced_once():
    """SGD makes its buffers in its first step: without them ready the compiled step is traced again on the
    second call (its guard on the optimizer's state fails), a compile that lands in the warm-up."""
    def frames(prime: bool) -> list[int]:
        torch._dynamo.reset()
        graphs = []

        def counting(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        _, step, _ = _sgd_and_step(prime)
        compiled = torch.compile(step, backend=counting)
        seen = []
        for _ in range(3):
            compiled()
            seen.append(len(graphs))
        return seen

    without, ready = frames(False), frames(True)
    assert ready[0] == ready[1] == ready[2]  # nothing traced after the first step
    assert without[1] > without[0]  # SGD's lazily made state: traced again on the second call


@pytest.mark.skipif(not (COMPILE_WORKS and CPU_FP16_TRAINING), reason="needs torch.compile and CPU float16 training")
def test_under_grad_scaler_the_optimizers_part_is_compiled_at_the_first_finite_step():
    """What the record's warm-up warning (README, "Correct timing") reports for amp_fp16 under torch.compile:
    GradScaler skips optimizer.step() while the scaled gradients overflow, so the compiled step traces the
    optimizer's part only at the first step that goes through, after the first step that reports the compile."""
    from backends.torch.optimizer import momentum_buffers_ready

    def frames(init_scale: float) -> tuple[list[int], list[float]]:
        torch._dynamo.reset()
        net, _, _ = _sgd_and_step(True)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        momentum_buffers_ready(optimizer, {"optimizer": ""})
        scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
        images, labels = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0)), torch.tensor([1, 3])
        graphs = []

        def counting(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        def step():
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(net(images), labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        compiled = torch.compile(step, backend=counting)
        seen, scales = [], []
        for _ in range(30):
            compiled()
            seen.append(len(graphs))
            scales.append(float(scaler.get_scale()))
        return seen, scales

    (finite, kept), (overflowing, halved) = frames(2.0 ** 4), frames(2.0 ** 24)
    assert kept[0] == 2.0 ** 4 and len(set(finite)) == 1  # every part traced in the first step
    went_through = next(i for i in range(1, len(halved)) if halved[i] == halved[i - 1])  # the first step not skipped
    assert halved[0] < 2.0 ** 24 and went_through > 1  # the first steps overflowed and were skipped
    assert overflowing[:went_through] == [overflowing[0]] * went_through  # nothing more traced while skipping
    assert overflowing[-1] > overflowing[0]  # the optimizer's part, traced once a step went through
