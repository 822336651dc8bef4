"""The TensorFlow backend, run in-process on the CPU with tiny sizes (64x64 images, batch 2, 1-2 steps).

Each test runs a spec through harness.worker.execute.measure_run (tests.specs.run_backend) as the worker does,
with a spec shaped as docs/architecture.md says. First steps of tf.function (~5-15 s) and XLA (~10-30 s) dominate.

The backend's worker-side modules import TensorFlow at their top, so collecting this file imports it: conftest.py
imports torch and triton first (TensorFlow 2.12 before torch 2.0 kills the process; triton after TensorFlow 2.21
segfaults it).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("tensorflow is not installed", allow_module_level=True)

from backends.tensorflow import TensorFlowBackend, compat  # noqa: E402
from backends.tensorflow import gemm as tf_gemm  # noqa: E402
from backends.tensorflow import resnet50 as tf_resnet  # noqa: E402
from backends.tensorflow import train as tf_train  # noqa: E402
from harness.errors import Unsupported  # noqa: E402
from harness.seam.backend import RunContext  # noqa: E402
from harness.workloads.resnet50_train import parameter_count  # noqa: E402
from tests.specs import (  # noqa: E402
    backend_spec,
    run_backend,
    run_handloop,
    tensorflow_uses_onednn_on_the_cpu,
)

ROOT = Path(__file__).resolve().parent.parent

TWO_BLOCKS = {"warmup": 0, "steps": 1, "repeats": 2}
ONE_BLOCK = {"warmup": 0, "steps": 1, "repeats": 1}
SMALL_TRAINING = {"batch_size": 2, "image_size": 64, "memory_format": "channels_last"}


def make_spec(workload: str, params: dict, *, measure: dict | None = None, device: str = "cpu", seed: int = 0) -> dict:
    """A spec as the worker receives it: validated params with defaults filled."""
    return backend_spec("tensorflow", workload, params, measure or TWO_BLOCKS, device=device, seed=seed)


def execute(spec: dict, ctx: RunContext | None = None) -> dict:
    return run_backend(TensorFlowBackend(), spec, ctx)


def train(measure: dict | None = None, ctx: RunContext | None = None, **params) -> dict:
    return execute(make_spec("resnet50_train", {**SMALL_TRAINING, **params}, measure=measure), ctx)


def train_in_fresh_process(measure: dict | None = None, **params) -> dict:
    """train() in a Python of its own, for figures that what this process ran before would move."""
    spec = make_spec("resnet50_train", {**SMALL_TRAINING, **params}, measure=measure)
    code = ("import json, sys\n"
            "from backends.tensorflow import TensorFlowBackend\n"
            "from harness.session.plan import RunSpec\n"
            "from tests.specs import run_backend\n"
            "fields = run_backend(TensorFlowBackend(), RunSpec.from_dict(json.loads(sys.argv[1])))\n"
            "print(json.dumps(fields, default=str))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec.to_dict())], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])



@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


@pytest.fixture(scope="module")
def eager_fp32_run() -> dict:
    """One small eager fp32 channels_last training run, shared by the tests that only read it."""
    return train()


# --- the package --------------------------------------------------------------------------------


def test_importing_the_backend_imports_neither_tensorflow_nor_keras():
    # every question the parent asks before a worker starts: names, techniques, every refusal, the launch
    code = (
        "import sys, backends.tensorflow as b; t = b.TensorFlowBackend(); t.unsupported_reason('gemm', {}, 'cpu'); "
        "t.workload_names(); t.unsupported_reason('resnet50_train', {'model': 'keras_resnet50_v1', "
        "'recompute': 'blocks'}, 'cpu'); t.unsupported_reason('resnet50_train', {'execution': 'default', "
        "'grad_accum': 2}, 'cpu'); t.worker_env({}); "
        "bad = [m for m in ('tensorflow', 'keras', 'tf_keras') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_backend_declares_its_names_and_techniques():
    backend = TensorFlowBackend()
    assert backend.name == "tensorflow" and "tf" in backend.aliases
    assert backend.techniques("resnet50_train")["recompute"] == ("none", "blocks")
    assert backend.unsupported_reason("gemm", {"precision": "tf32"}, "cpu").startswith("TF32")
    assert backend.techniques("resnet50_train")["execution"] == ("eager", "graph", "cuda_graph", "compiled", "default")
    assert "default" not in backend.techniques("gemm")["execution"]
    assert backend.part_target("resnet50_train") == "backends.tensorflow.resnet50:PART"
    assert backend.validate_options({}) == {"keras": "auto"}
    with pytest.raises(ValueError, match="keras"):
        backend.validate_options({"keras": "keras4"})
    with pytest.raises(ValueError, match="compile_mode: unknown option"):
        backend.validate_options({"compile_mode": "default"})


def test_memory_growth_can_be_turned_off_and_the_default_keeps_old_run_keys(monkeypatch):
    # TensorFlow's default allocator (growth off: one region) may fit batches that growth's regions cannot;
    # harness keeps growth on unless a run asks, and a run that does not ask keeps the key it always had
    from harness.session.plan import run_key

    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    backend = TensorFlowBackend()
    assert backend.validate_options({"memory_growth": True}) == backend.validate_options({}) == {"keras": "auto"}
    off = backend.validate_options({"memory_growth": False})
    assert off == {"keras": "auto", "memory_growth": False}
    assert run_key("s", "gemm", "tensorflow", "cpu", {}, off) != run_key("s", "gemm", "tensorflow", "cpu", {}, {"keras": "auto"})
    assert backend.worker_env(off)["TF_FORCE_GPU_ALLOW_GROWTH"] == "false"
    assert backend.worker_env({"keras": "auto"})["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    with pytest.raises(ValueError, match="memory_growth"):
        backend.validate_options({"memory_growth": "sometimes"})
    # and the worker's device set-up leaves the allocator alone (it would otherwise turn growth on again)
    from backends.tensorflow import device as tf_device

    monkeypatch.setenv("TF_FORCE_GPU_ALLOW_GROWTH", "false")
    untouched = SimpleNamespace(list_physical_devices=lambda kind: pytest.fail("memory growth was set"))
    monkeypatch.setattr(tf_device, "tf", SimpleNamespace(config=untouched))
    tf_device.enable_memory_growth()


@pytest.mark.parametrize("workload", ["gemm", "resnet50_train"])
def test_a_whole_step_cuda_graph_has_no_tensorflow_equivalent_and_says_so(workload):
    reason = TensorFlowBackend().unsupported_reason(workload, {"execution": "cuda_graph"}, "cuda:0")
    assert "no API that captures a whole training step in one CUDA graph" in reason and "compiled" in reason


def test_the_keras_choice_is_checked_against_the_installed_tensorflow():
    backend = TensorFlowBackend()
    version = backend.framework_version()
    modern = tuple(int(x) for x in version.split(".")[:2]) >= (2, 16)
    keras3 = backend.unsupported_reason("resnet50_train", {}, "cpu", {"keras": "keras3"})
    assert (keras3 is None) == modern, keras3
    if not modern:
        assert "Keras 3 needs TensorFlow 2.16+" in keras3
        assert backend.keras_choice({"keras": "auto"}) == "tf_keras"
    # tf_keras: TF_USE_LEGACY_KERAS=1 for a worker of TF 2.16+, which TF reads at import
    env = backend.worker_env({"keras": "tf_keras"})
    assert env.get("TF_USE_LEGACY_KERAS") == ("1" if modern else None)
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    if modern:
        assert backend.worker_env({"keras": "keras3"})["TF_USE_LEGACY_KERAS"] == "0"


def test_tensorflow_oom_and_memory_error_are_out_of_memory_with_their_evidence(tf):
    backend = TensorFlowBackend()
    evidence = backend.out_of_memory(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor"))
    assert evidence == "ResourceExhaustedError: OOM when allocating tensor"
    assert backend.out_of_memory(MemoryError())
    assert "OOM when allocating" in backend.out_of_memory(RuntimeError("OOM when allocating tensor with shape[256,64,112,112]"))
    assert backend.out_of_memory(ValueError("shapes do not match")) is None
    # TF 2.21 on an H200 at the memory limit: the cause is the last line of a graph error, not the first
    scratch = backend.out_of_memory(RuntimeError(
        "Graph execution error:\n\nDetected at node Conv2DBackpropFilter defined at ...\n\nCUDNN failed to "
        "allocate the scratch space for the runner or to find a working no-scratch runner.\n\t [[{{node x}}]]"))
    assert scratch and "CUDNN failed to allocate the scratch space" in scratch


class _FakeConfig:
    """tf.config's device calls on a machine with two GPUs; `started` = a runtime already running."""

    def __init__(self, started=False, visible=None):
        self.gpus = ["GPU0", "GPU1"]
        self.visible = list(self.gpus if visible is None else visible)
        self.started = started

    def list_physical_devices(self, kind):
        return list(self.gpus) if kind == "GPU" else ["CPU0"]

    def set_visible_devices(self, devices, kind):
        if self.started:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        self.visible = list(devices)

    def get_visible_devices(self, kind):
        return list(self.visible)


@pytest.mark.parametrize("started, visible, expected", [
    (False, None, ("/GPU:0", ["GPU1"])),  # a fresh worker: only cuda:1 visible, as TF's GPU 0
    (True, None, ("/GPU:1", ["GPU0", "GPU1"])),  # a started runtime: the GPU keeps its logical index
])
def test_a_run_on_one_gpu_makes_only_that_gpu_visible(monkeypatch, started, visible, expected):
    """torch touches only the GPU it runs on; TensorFlow opened a context on every GPU and synced them all."""
    from backends.tensorflow import device as tf_device

    config = _FakeConfig(started, visible)
    monkeypatch.setattr(tf_device, "tf", SimpleNamespace(config=config))
    placement = tf_device.resolve("cuda:1")
    assert placement.neutral == "cuda:1" and (placement.tf_name, config.visible) == expected
    assert placement.memory_name == expected[0].lstrip("/")
    hidden = _FakeConfig(started=True, visible=["GPU0"])
    monkeypatch.setattr(tf_device, "tf", SimpleNamespace(config=hidden))
    with pytest.raises(Unsupported, match="cuda:1: TensorFlow's runtime started in this process without it"):
        tf_device.resolve("cuda:1")


def test_a_gpu_tensorflow_does_not_see_is_unsupported_and_auto_falls_back_to_the_cpu():
    with pytest.raises(Unsupported, match=r"TensorFlow sees 0 GPU"):
        execute(make_spec("gemm", {"size": 32}, device="cuda:3"))
    result = execute(make_spec("gemm", {"size": 32}, device="auto"))
    assert result["device"] == "cpu" and result["device_name"]


# --- gemm ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_gemm_is_correct_on_the_cpu(precision):
    result = execute(make_spec("gemm", {"m": 96, "n": 64, "k": 80, "batch": 2, "precision": precision}))
    assert result["status"] == "ok", result.get("error")
    assert result["checks"]["correct"] is True
    assert result["checks"]["max_rel_error"] <= result["checks"]["tolerance"]
    assert len(result["samples"]) == 2 and all(s > 0 for s in result["samples"])
    assert result["tflops"] == pytest.approx(float(np.median(result["samples"])))
    dtype = tf_gemm.DTYPES[precision]
    assert result["api"]["precision"].startswith(f"{dtype} operands")
    assert "enable_tensor_float_32_execution(False)" in result["api"]["precision"]


def test_gemm_tf32_on_the_cpu_is_unsupported_with_a_reason_naming_the_resolved_device():
    from harness.worker.execute import execute as worker_execute

    fields = worker_execute(make_spec("gemm", {"size": 32, "precision": "tf32"}, device="auto")).to_dict()
    assert fields["status"] == "unsupported" and "TF32 is a tensor-core format" in fields["error"]
    assert fields["device"] == "cpu"  # the worker records `cpu`, not `auto`


def test_gemm_with_a_corrupted_product_is_failed_and_keeps_its_figures(monkeypatch, tf):
    monkeypatch.setattr(tf_gemm, "_product", lambda a, b: tf.linalg.matmul(a, b) + 1.0)
    result = execute(make_spec("gemm", {"size": 64}))
    assert result["status"] == "failed"
    assert result["error"].startswith("wrong result:")
    assert result["checks"]["correct"] is False
    assert len(result["samples"]) == 2 and result["tflops"] > 0


def test_gemm_execution_modes_each_name_their_api_and_trace_once():
    apis = {}
    for execution in ("eager", "graph", "compiled"):
        result = execute(make_spec("gemm", {"size": 48, "execution": execution}, measure={"warmup": 2, "steps": 3, "repeats": 2}))
        assert result["checks"]["correct"] is True
        apis[execution] = result["api"]["execution"]
        assert result["timing"]["traces"] == (None if execution == "eager" else 1)
    assert apis["graph"].startswith("tf.function(jit_compile=False)")
    assert apis["compiled"].startswith("tf.function(jit_compile=True)")
    assert apis["eager"].startswith("eager: plain Python step")


# --- resnet50_train: the model ------------------------------------------------------------------


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_keras_resnet50_v1_5_build_has_torchvisions_parameter_count(data_format):
    compat.set_global_policy("float32")
    model = tf_resnet.build_resnet50(64, 1000, data_format)
    assert tf_train.trainable_parameters(model) == 25_557_032 == parameter_count(1000)
    assert len(model.blocks) == 16


def max_logit_difference_from_torchvision(data_format: str, image_size: int = 80, execution: str = "compiled") -> float:
    """Copy a torchvision resnet50's weights (BatchNorm statistics randomized) into the Keras build and
    return the largest relative difference of their inference logits. Import torch before calling this."""
    import tensorflow as tf
    import torch
    import torchvision

    torch.manual_seed(0)
    reference = torchvision.models.resnet50().eval()
    with torch.no_grad():
        for module in reference.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.1, 0.1)
    weights = {k: v.numpy() for k, v in reference.state_dict().items()}

    compat.set_global_policy("float32")
    model = tf_resnet.build_resnet50(image_size, 1000, data_format)
    layers = {layer.name: layer for sub in (model.stem, *model.blocks, model.head) for layer in sub.layers}

    def conv(keras_name, torch_name):
        layers[keras_name].set_weights([weights[f"{torch_name}.weight"].transpose(2, 3, 1, 0)])

    def bn(keras_name, torch_name):
        layers[keras_name].set_weights([weights[f"{torch_name}.{k}"] for k in ("weight", "bias", "running_mean", "running_var")])

    conv("conv1", "conv1")
    bn("bn1", "bn1")
    for stage, count in enumerate((3, 4, 6, 3), start=1):
        for index in range(count):
            k, t = f"layer{stage}_{index}", f"layer{stage}.{index}"
            for j in (1, 2, 3):
                conv(f"{k}_conv{j}", f"{t}.conv{j}")
                bn(f"{k}_bn{j}", f"{t}.bn{j}")
            if index == 0:
                conv(f"{k}_downsample_conv", f"{t}.downsample.0")
                bn(f"{k}_downsample_bn", f"{t}.downsample.1")
    layers["fc"].set_weights([weights["fc.weight"].T, weights["fc.bias"]])

    images = np.random.default_rng(0).standard_normal((2, 3, image_size, image_size)).astype(np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(images)).numpy()
    keras_images = images.transpose(0, 2, 3, 1) if data_format == "channels_last" else images
    # through XLA: TF 2.12's oneDNN NCHW max pool on the CPU returns wrong values in eager mode and, depending
    # on the graph it lands in, in tf.function too (its NCHW gradient raises, so training there is Unsupported)
    forward = lambda t: model(t, training=False)  # noqa: E731
    if execution != "eager":
        forward = tf.function(forward, jit_compile=execution == "compiled")
    got = forward(tf.constant(keras_images)).numpy()
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def test_keras_resnet50_v1_5_computes_what_torchvision_computes_with_the_same_weights():
    if importlib.util.find_spec("torchvision") is None:  # not importorskip: it would import torch after TF
        pytest.skip("torchvision is not installed")
    # torch is imported first, in its own process: TF 2.12 imported before torch 2.0 can hang
    code = (
        "import torch, torchvision, json; from tests.test_tf_backend import max_logit_difference_from_torchvision as d; "
        "print(json.dumps([d('channels_last'), d('channels_first')]))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    differences = json.loads(out.strip().splitlines()[-1])
    assert max(differences) < 1e-4, differences


def test_keras_resnet50_v1_build_is_keras_applications_with_its_own_count():
    compat.set_global_policy("float32")
    model = tf_resnet.build_keras_resnet50_v1(64, 1000, "channels_last")
    trainable = tf_train.trainable_parameters(model)
    total = trainable + int(sum(np.prod(v.shape) for v in model.non_trainable_weights))
    # harness counts trainable weights, as torchvision does; Keras's "Total params" adds the
    # BatchNorm moving statistics
    assert trainable == 25_583_592 == parameter_count(1000, "keras_resnet50_v1")
    assert total == 25_636_712


# --- resnet50_train: runs -----------------------------------------------------------------------


def test_training_gives_finite_losses_one_sample_per_repeat_and_the_v1_5_count(eager_fp32_run):
    result = eager_fp32_run
    assert result["status"] == "ok", result.get("error")
    checks = result["checks"]
    assert math.isfinite(checks["loss_first"]) and math.isfinite(checks["loss_last"])
    assert checks["model_parameters"] == 25_557_032
    assert len(result["samples"]) == 2 and all(s > 0 for s in result["samples"])
    if tensorflow_uses_onednn_on_the_cpu():
        assert result["peak_allocated_bytes"] > 100 * 2**20  # the weights alone are ~100 MB
    else:
        assert result["peak_allocated_bytes"] is None
    assert result["tflops"] > 0 and result["first_step_s"] > 0
    assert result["api"]["memory_format"].startswith("keras data_format='channels_last'")
    assert result["env"]["keras"] == compat.keras_version()
    assert result["api"]["keras"] == compat.keras_api()
    assert result["env"]["threads"]["intra_op"] >= 0


def test_a_capacity_probe_reads_no_batch_back_to_fingerprint_it(eager_fp32_run):
    # seconds of copying and hashing at the batches a probe reaches on a GPU; a probe is compared with nothing
    probe = train(measure={**ONE_BLOCK, "probe": True})
    assert probe["status"] == "ok", probe.get("error")
    assert probe["checks"]["inputs_fingerprint"] is None
    assert isinstance(eager_fp32_run["checks"]["inputs_fingerprint"], str)


def test_channels_first_trains_the_same_network_or_is_unsupported_with_a_reason(eager_fp32_run):
    try:
        result = train(memory_format="channels_first", measure=ONE_BLOCK)
    except Unsupported as exc:
        # Keras 2 on the CPU: TF's NCHW max pool gives wrong values / has no gradient; without oneDNN (a CPU
        # without AVX-512) TensorFlow has no NCHW convolution on the CPU at all
        assert not compat.is_keras3() or not tensorflow_uses_onednn_on_the_cpu()
        assert "channels_first (NCHW)" in str(exc)
        return
    assert result["status"] == "ok", result.get("error")
    assert result["api"]["memory_format"] == "keras data_format='channels_first'"
    # same seed, same weights, same images: the first loss matches the channels_last run's
    assert result["checks"]["loss_first"] == pytest.approx(eager_fp32_run["checks"]["loss_first"], rel=1e-4)


def test_eager_training_says_it_is_a_debugging_mode_and_the_others_do_not():
    from backends.tensorflow import EAGER_TRAINING

    ctx = RunContext()
    train(ctx=ctx, image_size=32, measure=ONE_BLOCK)
    assert EAGER_TRAINING in ctx.warnings
    ctx = RunContext()
    train(ctx=ctx, image_size=32, measure=ONE_BLOCK, execution="graph")
    assert EAGER_TRAINING not in ctx.warnings


def test_fit_on_a_gpu_with_device_inputs_says_it_copies_the_batch_each_step():
    # Keras fit's tf.data runs on the host: a "device" batch is copied to the GPU every step (on the H200 its host
    # rows, prefetching to the GPU, were 15-23% faster), so its record says so where that happens, and only there
    from backends.tensorflow import FIT_DEVICE_INPUTS
    from backends.tensorflow.device import Placement
    from backends.tensorflow.train import add_warnings
    from harness.workloads.resnet50_train import ResNet50Params

    gpu, cpu = Placement("cuda:0", "/GPU:0"), Placement("cpu", "/CPU:0")
    said = {}
    for name, placement, execution, inputs in [("fit gpu device", gpu, "default", "device"),
                                               ("fit gpu host", gpu, "default", "host"),
                                               ("fit cpu device", cpu, "default", "device"),
                                               ("graph gpu device", gpu, "graph", "device")]:
        ctx = RunContext()
        add_warnings(ResNet50Params(execution=execution, inputs=inputs), placement, ctx)
        said[name] = FIT_DEVICE_INPUTS in ctx.warnings
    assert said == {"fit gpu device": True, "fit gpu host": False, "fit cpu device": False, "graph gpu device": False}


def test_training_execution_modes_name_different_apis_and_do_not_retrace(eager_fp32_run):
    apis = {"eager": eager_fp32_run["api"]["execution"]}
    assert eager_fp32_run["timing"]["traces"] is None
    for execution in ("graph", "compiled"):
        result = train(execution=execution)
        assert result["status"] == "ok", result.get("error")
        assert math.isfinite(result["checks"]["loss_last"])
        assert result["timing"]["traces"] == 1  # three calls, one trace
        apis[execution] = result["api"]["execution"]
    assert apis["graph"].startswith("tf.function(jit_compile=False)")
    assert apis["compiled"].startswith("tf.function(jit_compile=True)")
    assert len(set(apis.values())) == 3


def test_tf32_training_on_the_cpu_is_unsupported_with_a_reason():
    with pytest.raises(Unsupported, match="TF32"):
        train(precision="tf32")


def test_amp_bf16_trains_under_the_mixed_bfloat16_policy_with_float32_logits():
    try:
        result = train(precision="amp_bf16", image_size=32, measure=ONE_BLOCK)
    except Exception as exc:  # noqa: BLE001 - the framework's own error type, whichever TF raised it
        if "does not support bfloat16" in str(exc) and not tensorflow_uses_onednn_on_the_cpu():
            pytest.skip("TensorFlow 2.12 has no bfloat16 batch normalization on the CPU without oneDNN "
                        "(a CPU without AVX-512)")
        raise
    assert result["status"] == "ok", result.get("error")
    assert "mixed_bfloat16" in result["api"]["precision"]
    assert math.isfinite(result["checks"]["loss_first"])


def test_amp_fp16_scales_the_loss_through_a_loss_scale_optimizer(monkeypatch, tf):
    seen = {"scaled": 0}
    real = compat.optimizer_update

    def spy(optimizer, variables, *, loss_scaling):
        update = real(optimizer, variables, loss_scaling=loss_scaling)
        inner_scale = update.scale

        def counting_scale(loss):
            seen["scaled"] += 1
            return inner_scale(loss)

        update.scale = counting_scale
        seen["update"] = update
        return update

    monkeypatch.setattr(compat, "optimizer_update", spy)
    result = train(precision="amp_fp16", image_size=32, measure=ONE_BLOCK)
    assert result["status"] == "ok", result.get("error")
    update = seen["update"]
    assert "LossScaleOptimizer" in type(update.optimizer).__name__
    assert seen["scaled"] == 2  # eager: once per step, first step and one timed step
    scale = result["timing"]["loss_scale"]
    assert scale is not None and scale > 1
    assert float(update.scale(tf.constant(1.0))) == scale  # the loss really is multiplied by the scale
    assert "mixed_float16" in result["api"]["precision"] and "LossScaleOptimizer" in result["api"]["precision"]


def test_recompute_blocks_lowers_the_cpu_allocator_peak():
    # activations must outweigh weights + gradients + momentum (~300 MB) for recompute to pay:
    # at batch 4, 160x160 the peak falls (about 707 -> 470 MiB on TF 2.21); at 64x64 it rises
    if not tensorflow_uses_onednn_on_the_cpu():
        pytest.skip("this TensorFlow keeps no CPU allocator statistics on this CPU (oneDNN off): no peak to compare")
    # each in a Python of its own: the peak counts what is in use when it is reset, and in this process earlier tests'
    # tensors and caches (oneDNN's among them) can still be (about 1.3 GB of them, seen in a whole run of the suite)
    peaks = {}
    for recompute in ("none", "blocks"):
        result = train_in_fresh_process(recompute=recompute, batch_size=4, image_size=160, measure=ONE_BLOCK)
        assert result["status"] == "ok", result.get("error")
        peaks[recompute] = result["peak_allocated_bytes"]
        if recompute == "blocks":
            assert result["api"]["recompute"] == "tf.recompute_grad around each of the 16 bottleneck blocks"
    assert peaks["blocks"] < 0.85 * peaks["none"], peaks


def test_recompute_blocks_runs_inside_tf_function():
    result = train(recompute="blocks", execution="graph", image_size=32, measure=ONE_BLOCK)
    assert result["status"] == "ok", result.get("error")
    assert result["timing"]["traces"] == 1


def test_grad_accum_2_counts_twice_the_images_and_averages_the_gradients(eager_fp32_run):
    result = train(grad_accum=2)
    assert result["status"] == "ok", result.get("error")
    assert result["timing"]["images_per_step"] == 4
    for rate, wall in zip(result["samples"], result["timing"]["block_wall_s"]):
        assert rate == pytest.approx(4 * result["timing"]["steps_per_block"] / wall)
    # the same micro-batch twice, gradients averaged: the same updates, so the same loss, as grad_accum 1
    assert result["checks"]["loss_last"] == pytest.approx(eager_fp32_run["checks"]["loss_last"], rel=1e-3)


def test_a_non_finite_loss_is_reported_as_diverged(monkeypatch):
    real = tf_train.build_inputs

    def poisoned(*args):
        inputs = real(*args)
        inputs.features = inputs.features * float("nan")
        return inputs

    monkeypatch.setattr(tf_train, "build_inputs", poisoned)
    result = train(image_size=32, measure=ONE_BLOCK)
    assert result["status"] == "diverged"
    assert "non-finite loss" in result["error"]
    assert len(result["samples"]) == 1


def test_keras_resnet50_v1_trains_and_recompute_on_it_is_unsupported():
    result = train(model="keras_resnet50_v1", image_size=32, measure=ONE_BLOCK)
    assert result["status"] == "ok", result.get("error")
    assert result["checks"]["model_parameters"] == result["checks"]["model_parameters_expected"] == 25_583_592
    with pytest.raises(Unsupported, match="keras.applications.ResNet50"):
        train(model="keras_resnet50_v1", recompute="blocks")


# --- the trainer's generic parts ------------------------------------------------------------------


def test_adamw_decaying_matrices_leaves_vectors_out_of_the_weight_decay(tf):
    # zero gradients: Adam's moments stay zero and its step is 0 / (0 + eps), so only the decoupled decay moves a
    # weight, by lr * weight_decay of itself
    from backends.tensorflow.optimizer import keras_optimizer
    from harness.workloads.training import OptimizerSpec

    kernel, bias = tf.Variable(tf.ones((3, 2))), tf.Variable(tf.ones((2,)))
    spec = OptimizerSpec("adamw", lr=0.1, weight_decay=0.5, decay="matrices")
    optimizer, api = keras_optimizer(spec, [kernel, bias])
    update = compat.optimizer_update(optimizer, [kernel, bias], loss_scaling=None)
    update.apply([tf.zeros((3, 2)), tf.zeros((2,))], [kernel, bias])
    assert np.allclose(kernel.numpy(), 1 - 0.1 * 0.5) and np.allclose(bias.numpy(), 1.0)
    assert "AdamW(learning_rate=0.1, weight_decay=0.5" in api and "the 1 weights of 2+ dimensions only" in api
    everything, _ = keras_optimizer(OptimizerSpec("adamw", lr=0.1, weight_decay=0.5), [bias])
    compat.optimizer_update(everything, [bias], loss_scaling=None).apply([tf.zeros((2,))], [bias])
    assert np.allclose(bias.numpy(), 1 - 0.1 * 0.5)


def test_the_neutral_loss_is_the_mean_cross_entropy_over_every_position_in_float32(tf):
    from backends.tensorflow.step import cross_entropy

    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 3, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=(2, 3))
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    expected = -np.take_along_axis(log_softmax, labels[..., None], axis=-1).mean()
    loss = cross_entropy(tf.constant(logits, dtype=tf.bfloat16), tf.constant(labels))
    assert loss.dtype == tf.float32
    assert float(cross_entropy(tf.constant(logits), tf.constant(labels))) == pytest.approx(expected, rel=1e-5)


# --- the hand-written yardstick ------------------------------------------------------------------


@pytest.mark.parametrize("execution", ["graph", "compiled"])
def test_tf_handloop_benchmark_trains_the_same_model_without_harness(execution):
    # 64 px, as the backend's own training tests: at 32 px the last stage is 1x1 and batch-2 BatchNorm
    # lets the loss collapse or blow up within three steps (seen under TF 2.12's XLA on the CPU)
    report = run_handloop("tf_resnet50_handloop.py", [
        "--device", "/CPU:0", "--batch-size", "2", "--image-size", "64", "--steps", "1", "--warmup", "0",
        "--repeats", "2", "--precision", "fp32", "--execution", execution])
    assert report["trainable_parameters"] == 25_557_032  # the same ResNet-50 v1.5 as harness builds
    assert report["images_per_s"] > 0 and len(report["samples"]) == 2 and math.isfinite(report["loss_last"])


def test_grad_accum_under_xla_rotates_each_micro_batch_and_trains_alike():
    # the micro-batches are the same images: under XLA a loop-invariant gradient could be hoisted and
    # computed once (seen with JAX on an H200); each is the batch rotated by its index instead
    losses = {}
    for accum in (1, 2):
        result = train(grad_accum=accum, execution="compiled", measure=ONE_BLOCK)
        assert result["status"] == "ok", result.get("error")
        losses[accum] = result["checks"]["loss_first"]
        if accum == 2:
            assert "rotated by i (tf.roll)" in result["api"]["grad_accum"]
    # the first step's loss is computed before any update: the same images give the same loss
    assert losses[2] == pytest.approx(losses[1], rel=1e-4)


def test_a_capacity_probe_keeps_cudnn_autotuning_and_turns_xla_s_off(monkeypatch):
    # without cuDNN autotuning TensorFlow has only the heuristic's algorithm and a no-scratch fallback: fp32
    # Conv2DBackpropFilter on the H200 failed for its scratch with ~35 GiB free, bounding probes, not training
    monkeypatch.delenv("TF_CUDNN_USE_AUTOTUNE", raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    env = TensorFlowBackend().worker_env({"keras": "auto"}, probe=True)
    assert "TF_CUDNN_USE_AUTOTUNE" not in env
    assert env["XLA_FLAGS"] == "--xla_gpu_autotune_level=0"
    assert "XLA_FLAGS" not in TensorFlowBackend().worker_env({"keras": "auto"})
    assert TensorFlowBackend.gpu_max_tensor_elements == 2**31 - 1
