"""The TensorFlow / Keras backend of harness.

The package's declarations (this module) and its launcher are what the parent process imports: neither imports
TensorFlow nor Keras. Every other module of the backend (compat, device, replicas, train, the model parts, gemm,
step, fit, inputs, profile) is the worker's side: it imports TensorFlow at its top, and only `open_device`,
`open_replica` and `prepare`, which run in a worker process, import it.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sys
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from backends.tensorflow.launcher import tensorflow_launch
from harness.errors import ONEDNN_ALLOCATION, first_line, line_naming
from harness.seam.adapter import Device
from harness.seam.backend import TF32_ON_CPU, Backend
from harness.seam.distributed import Cluster, Launch, Replica
from harness.seam.runspec import RunSpec
from harness.workloads import technique_values

#: Messages of allocation failures that TensorFlow raises as some other error type (InternalError and
#: friends, e.g. a GPU-to-host copy into memory that could not be allocated). GPU ones not yet seen here.
_OOM_MESSAGES = (
    "OOM when allocating",
    "RESOURCE_EXHAUSTED",
    "out of memory",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "failed to allocate memory",
    "failed to allocate the scratch space",  # cuDNN's workspace at the memory limit (TF 2.21 on an H200)
    "Dst tensor is not initialized",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
)


NO_CUDA_GRAPH = (
    "TensorFlow has no API that captures a whole training step in one CUDA graph and replays it; under XLA "
    "(execution: compiled) it can replay compiled code through CUDA-graph command buffers (XLA_FLAGS), which "
    "harness records in api.execution"
)
KERAS3_BEFORE_216 = "TensorFlow {version} bundles Keras 2 (tf.keras) only; Keras 3 needs TensorFlow 2.16+"
NO_TF_KERAS = ("keras=tf_keras needs the tf_keras package beside TensorFlow {version} "
               "(pip install 'tf_keras~={minor}.0'); it is not installed")
EAGER_TRAINING = (
    "TensorFlow eager runs the training step op by op from Python, a debugging mode (Keras's fit runs the step "
    "as a tf.function, XLA-compiled by Keras 3 on a GPU): compare execution default (model.fit as Keras "
    "resolves it), graph or compiled for TensorFlow's training speed"
)
FIT_DEVICE_INPUTS = (
    "model.fit reads its batches through tf.data, which runs on the host: with inputs: device it still copies "
    "the batch to the GPU every step, not overlapped with the step, where a device batch stays resident on other "
    "backends; compare inputs: host (tf.data prefetching to the GPU) for like with like"
)
OPTIMIZER_JIT_KERAS3 = ("tensorflow.optimizer_jit_compile=true is Keras 2's (tf_keras's) setting: Keras 3's "
                        "optimizers compile nothing themselves (XLA follows execution, or compile's jit_compile)")
FIT_GRAD_ACCUM = (
    "execution: default is Keras's model.fit, which takes one optimizer step per batch: grad_accum > 1 is "
    "not a path Keras users get without writing their own train_step (use graph or compiled for grad_accum)"
)
FIT_REPLICAS = (
    "execution: default with replicas > 1 would be model.fit under a tf.distribute strategy, where Keras 3 "
    "turns jit_compile='auto' off and the data pipeline is distributed by Keras: not implemented; use graph "
    "or compiled for data-parallel TensorFlow"
)
KERAS_V1_RECOMPUTE_REASON = (
    "recompute=blocks wraps the bottleneck blocks of harness's own ResNet-50 build; "
    "keras.applications.ResNet50 is one functional graph with no block boundaries to wrap"
)
WHOLE_STEP_XLA_CPU = (
    "tensorflow.distributed_xla=whole_step needs GPUs: MultiWorkerMirroredStrategy keeps merge_call under XLA "
    "unless every device is a GPU, and XLA has no collectives on the CPU; use forward_backward"
)
MIRRORED_WHOLE_STEP = (
    "tensorflow.distributed_xla=whole_step compiles strategy.run into one XLA computation per worker process; "
    "with tensorflow.strategy=mirrored one process holds every replica, on several devices, which one XLA "
    "computation cannot span: use forward_backward"
)


def fit_unsupported_reason(params: dict) -> str | None:
    """Why `model.fit` (execution: default) cannot run these training params as a Keras user would (None: it can)."""
    if int(params.get("grad_accum") or 1) > 1:
        return FIT_GRAD_ACCUM
    if int(params.get("replicas") or 1) > 1:
        return FIT_REPLICAS
    return None


class TensorFlowOptions(BaseModel):
    """The TensorFlow backend's options (`options: {tensorflow: {...}}`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Which Keras builds the model: `keras3` (the `keras` package, TF 2.16+), `tf_keras` (Keras 2:
    #: the tf_keras package with TF_USE_LEGACY_KERAS=1 on TF 2.16+, tf.keras itself before), or
    #: `auto`, whatever this TensorFlow uses by default (recorded in api.keras).
    keras: Literal["auto", "keras3", "tf_keras"] = "auto"
    #: TensorFlow's GPU allocator takes memory as it goes (True, harness's default: NVML's used memory then
    #: means something) or all of it at the start, TensorFlow's own default (False: one region, so one large
    #: buffer is not split across regions; it may fit larger batches). TF_FORCE_GPU_ALLOW_GROWTH for the
    #: worker; what was in force is in env.framework.gpu_memory_growth. Left out of a record's options when
    #: True, so configurations stored before the option existed keep their run_key.
    memory_growth: bool = True
    #: With `replicas > 1` and `execution: compiled`, what XLA compiles. `forward_backward` (the default):
    #: each replica's forward and backward, the gradient all-reduce and the SGD update in the tf.function
    #: graph around it. `whole_step`: `tf.function(jit_compile=True)` around `strategy.run` itself, so the
    #: all-reduce and the update are compiled too where TensorFlow allows it (MultiWorkerMirroredStrategy
    #: skips merge_call under XLA when every device is a GPU; on the CPU XLA has no collectives, and the run
    #: is unsupported). Left out of a record's options at its default.
    distributed_xla: Literal["forward_backward", "whole_step"] = "forward_backward"
    #: With `replicas > 1`, which tf.distribute strategy trains: `multi_worker` (the default):
    #: MultiWorkerMirroredStrategy, one worker process per replica (as torchrun starts DDP), collectives
    #: between the processes; `mirrored`: MirroredStrategy, one process holding every replica, one device
    #: each (cuda:K..K+R-1), the gradients all-reduced inside the process (tf.distribute.NcclAllReduce on
    #: GPUs, ReductionToOneDevice over logical CPU devices on the CPU). One machine only. Left out of a
    #: record's options at its default.
    strategy: Literal["multi_worker", "mirrored"] = "multi_worker"
    #: Keras 2's (tf_keras, tf.keras before TF 2.16) XLA compilation of the optimizer's update in the eager,
    #: graph and compiled modes: False (harness's default there, so that only `execution` decides XLA) or
    #: True (Keras 2's own default on a GPU). Under `execution: default` Keras's own default always holds.
    #: Keras 3 optimizers compile nothing themselves: True is unsupported there. Recorded in api.optimizer;
    #: left out of a record's options at its default.
    optimizer_jit_compile: bool = False
    #: Under `execution: default`, the training steps one `model.fit(steps_per_epoch=k)` call runs: one call of
    #: the timed step, counted as k steps (timing.steps_per_call). More steps per call spread fit's own set-up
    #: (its data handler, iterator and callbacks) over more steps, as a user's long epochs do. Left out of a
    #: record's options at its default.
    fit_steps: int = Field(20, ge=1, le=100_000)


def _version_tuple(version: str | None) -> tuple[int, int]:
    parts = (version or "0.0").split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return 0, 0


class TensorFlowBackend(Backend):
    """Runs the neutral workloads with TensorFlow and Keras (Keras 2 on TF 2.12-2.15, Keras 3 or tf_keras on 2.16+)."""

    name: ClassVar[str] = "tensorflow"
    aliases: ClassVar[tuple[str, ...]] = ("tf",)
    distributions: ClassVar[tuple[str, ...]] = ("tensorflow", "tensorflow-cpu", "tf-nightly")
    install_hint: ClassVar[str] = "pip install 'harness[tf]' (or harness[tf-cpu])"
    #: gemm's technique values, all of them (a single matrix product has no training path for `execution: default`
    #: to follow: docs/execution.md); a training workload's come from its parameter model (Backend.techniques)
    workloads: ClassVar[dict[str, dict[str, tuple[Any, ...]]]] = {"gemm": technique_values("gemm")}
    modules: ClassVar[dict[str, str]] = {"gemm": "backends.tensorflow.gemm"}
    #: runs every training workload (Workload.training) with its model part: a custom loop or Keras's model.fit
    trainer: ClassVar[str | None] = "backends.tensorflow.train"
    #: model parts this backend carries for the bundled training workloads
    parts: ClassVar[dict[str, str]] = {"resnet50_train": "backends.tensorflow.resnet50:PART",
                                       "gpt_train": "backends.tensorflow.gpt:PART"}
    #: `execution: default` is model.fit at Keras's own defaults (backends.tensorflow.fit)
    trains_by_default: ClassVar[bool] = True
    missing_modes: ClassVar[dict[str, str]] = {"cuda_graph": NO_CUDA_GRAPH}
    refused_on_cpu: ClassVar[dict[tuple[str, Any], str]] = {("precision", "tf32"): TF32_ON_CPU}
    options_model: ClassVar[type[BaseModel]] = TensorFlowOptions
    #: `import tensorflow` loads the CUDA libraries but opens no device: a probe's worker does it ahead
    preload_modules: ClassVar[tuple[str, ...]] = ("tensorflow",)
    #: replicas > 1: tf.distribute.MultiWorkerMirroredStrategy, one worker process per replica (TF_CONFIG)
    data_parallel: ClassVar[bool] = True
    #: On the H200 (TF 2.21) every ResNet-50 batch whose stem activation passed 2**31 elements failed in the
    #: stem's BatchNorm (an illegal address, or ResourceExhaustedError with ~48 GiB free), in fp32 and amp_bf16:
    #: TensorFlow's GPU kernels index with 32-bit integers. docs/benchmarks.md, fourth session of 2026-11-30.
    gpu_max_tensor_elements: ClassVar[int | None] = 2**31 - 1

    #: added later: left out at their defaults (memory growth on, forward_backward), so earlier records keep their run_key
    keyed_off_default: ClassVar[tuple[str, ...]] = ("memory_growth", "distributed_xla", "strategy",
                                                    "optimizer_jit_compile", "fit_steps")

    def keras_choice(self, options: dict | None) -> str:
        """`keras3` or `tf_keras`: the Keras a run with these options builds its model with."""
        choice = (options or {}).get("keras", "auto")
        if choice != "auto":
            return choice
        if _version_tuple(self.framework_version()) < (2, 16):
            return "tf_keras"
        legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true")
        return "tf_keras" if legacy else "keras3"

    def unsupported_reason(self, workload: str, params: dict, device: str, options: dict | None = None) -> str | None:
        """Combinations known to be impossible before TensorFlow is imported."""
        reason = super().unsupported_reason(workload, params, device, options)
        if reason:
            return reason
        if workload == "resnet50_train" and params.get("model") == "keras_resnet50_v1" and params.get("recompute") == "blocks":
            return KERAS_V1_RECOMPUTE_REASON
        if ((options or {}).get("distributed_xla") == "whole_step" and params.get("execution") == "compiled"
                and int(params.get("replicas") or 1) > 1):
            if device == "cpu":
                return WHOLE_STEP_XLA_CPU
            if (options or {}).get("strategy") == "mirrored":
                return MIRRORED_WHOLE_STEP
        if params.get("execution") == "default":
            reason = fit_unsupported_reason(params)
            if reason:
                return reason
        version = self.framework_version()
        keras = self.keras_choice(options)
        major_minor = _version_tuple(version)
        if keras == "keras3" and (options or {}).get("optimizer_jit_compile"):
            return OPTIMIZER_JIT_KERAS3
        if keras == "keras3" and version and major_minor < (2, 16):
            return KERAS3_BEFORE_216.format(version=version)
        if keras == "tf_keras" and version and major_minor >= (2, 16):
            try:
                md.version("tf_keras")
            except md.PackageNotFoundError:
                return NO_TF_KERAS.format(version=version, minor=f"{major_minor[0]}.{major_minor[1]}")
        return None

    def worker_env(self, options: dict, probe: bool = False) -> dict[str, str]:
        """Memory growth unless `memory_growth: false` (else TF takes nearly all device memory and NVML's figure
        means nothing), quiet logs,
        and the Keras choice, which TensorFlow reads once, at import (TF_USE_LEGACY_KERAS). A capacity probe
        turns XLA's autotuning off (--xla_gpu_autotune_level=0) but keeps cuDNN's: without it TensorFlow runs
        each convolution with the heuristic's first algorithm, and when that algorithm's scratch space cannot be
        allocated it fails unless a no-scratch algorithm exists (fp32 Conv2DBackpropFilter on the H200 has none:
        "CUDNN failed to allocate the scratch space for the runner or to find a working no-scratch runner" with
        ~35 GiB free), which bounds a batch no user's autotuned training is bound by. torch falls back to the
        next algorithm by itself (its probes keep cudnn.benchmark off)."""
        growth = "false" if (options or {}).get("memory_growth") is False else os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "true")
        env = {"TF_FORCE_GPU_ALLOW_GROWTH": growth,
               "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        if probe:
            env["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_gpu_autotune_level=0"]))
        if _version_tuple(self.framework_version()) >= (2, 16):
            env["TF_USE_LEGACY_KERAS"] = "1" if self.keras_choice(options) == "tf_keras" else "0"
        return env

    def compile_cache_env(self, directory: str) -> dict[str, str]:
        """None: TensorFlow's XLA persistent cache (TF_XLA_FLAGS=--tf_xla_persistent_cache_directory) fails
        the compile itself in TensorFlow 2.12 ("Not an XLA Runtime executable") and in 2.21 reads its entries
        back with a parse error, and TensorFlow keeps no cache of tf.function's tracing or cuDNN's autotuning
        across processes: every TensorFlow process compiles and autotunes from nothing."""
        return {}

    def launch(self, spec: RunSpec, worker: list[str], cluster: Cluster) -> Launch:
        """One worker process per replica of this node, each with its TF_CONFIG (MultiWorkerMirroredStrategy),
        or one process holding every replica under `strategy: mirrored` (backends.tensorflow.launcher)."""
        return tensorflow_launch(spec, worker, cluster)

    def open_replica(self, device: str, cpu_threads: dict, replica: Replica) -> Device:
        """This replica's device (only it visible to TensorFlow) and MultiWorkerMirroredStrategy over the workers;
        under `strategy: mirrored` (launch says so in HARNESS_TF_STRATEGY) every replica's device, in this one
        process, and MirroredStrategy over them."""
        # the worker's side, which imports TensorFlow: loaded in a worker only
        from backends.tensorflow.replicas import (
            TensorFlowMirroredDevice,
            TensorFlowReplicaDevice,
        )

        if os.environ.get("HARNESS_TF_STRATEGY") == "mirrored":
            return TensorFlowMirroredDevice(device, cpu_threads, replica)
        return TensorFlowReplicaDevice(device, cpu_threads, replica)

    def open_device(self, device: str, cpu_threads: dict) -> Device:
        """Import TensorFlow, set its thread pools, turn memory growth on and resolve the device."""
        # the worker's side, which imports TensorFlow: loaded in a worker only
        from backends.tensorflow.device import TensorFlowDevice

        return TensorFlowDevice(device, cpu_threads)

    def out_of_memory(self, exc: BaseException) -> str | None:
        """Evidence of an allocation failure: ResourceExhaustedError, MemoryError, or an allocator's message."""
        first = first_line(exc)
        if isinstance(exc, MemoryError) or type(exc).__name__ == "ResourceExhaustedError":
            return f"{type(exc).__name__}: {first}"
        tf = sys.modules.get("tensorflow")  # never import it here: if it was not imported, it raised nothing
        if tf is not None and isinstance(exc, tf.errors.ResourceExhaustedError):
            return f"{type(exc).__name__}: {first}"
        text = str(exc).lower()
        hit = next((m for m in _OOM_MESSAGES if m.lower() in text), None)
        if hit is None and os.environ.get("HARNESS_MEMORY_LIMIT_BYTES"):
            # under a host memory limit (--memory-limit), oneDNN reports a buffer it could not allocate
            # as a primitive it could not create (AbortedError ... MklNativeConv2DBackpropFilter)
            hit = next((m for m in ONEDNN_ALLOCATION if m.lower() in text), None)
        if not hit:
            return None
        return f"{type(exc).__name__} naming {hit!r}: {line_naming(exc, [hit], case_sensitive=False)}"


__all__ = ["TensorFlowBackend"]
