"""Every TensorFlow / Keras version difference this backend meets, each branch named by the version that needs it.

Two Keras generations are in use: Keras 2 (`tf.keras`, bundled with TF 2.12-2.15, and `tf_keras` when
TF_USE_LEGACY_KERAS=1) and Keras 3 (the `keras` package, TF 2.16+). `tf.keras` always names the one
TensorFlow itself uses, so everything here goes through it. Each function returns (or records) the
concrete API it called, for the result record's `api` field.

The worker's side of the backend, like every module but the package's `__init__` and its launcher: it imports
TensorFlow at its top, and only a worker imports it.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable

import tensorflow as tf

from harness.workloads.training import STATIC_LOSS_SCALE

#: The Keras this process builds with: Keras 2 on TF 2.12-2.15; on TF 2.16+ Keras 3, or tf_keras where
#: TF_USE_LEGACY_KERAS=1 (TensorFlowBackend.worker_env sets it before TensorFlow is imported). `tf.keras` names
#: whichever TensorFlow chose; it loads on first use.
keras = tf.keras


def keras_version() -> str:
    """The version string of the Keras that `tf.keras` names."""
    version = getattr(keras, "__version__", None)
    if version is None and str(getattr(keras, "__name__", "")).startswith("tf_keras"):
        import tf_keras  # TF 2.16+ with TF_USE_LEGACY_KERAS=1: tf.keras is tf_keras's API module

        version = tf_keras.__version__
    if version is None and hasattr(keras, "version"):
        version = keras.version()
    if version is None:  # Keras 2 inside TF 2.12-2.15 always has __version__; this is a last resort
        import keras as standalone

        version = standalone.__version__
    return str(version)


def keras_api() -> str:
    """Which Keras `tf.keras` names here, for the record (`keras 3.15.1`, `tf_keras 2.21.0 (Keras 2)`)."""
    version = keras_version()
    if is_keras3():
        return f"keras {version} (Keras 3)"
    if os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true"):
        return f"tf_keras {version} (Keras 2, TF_USE_LEGACY_KERAS=1)"
    return f"tf.keras {version} (Keras 2, bundled with TensorFlow {tf.__version__})"


def keras_major() -> int:
    """2 or 3."""
    return int(keras_version().split(".")[0])


def is_keras3() -> bool:
    """Whether `tf.keras` names Keras 3."""
    return keras_major() >= 3


# --- mixed precision policy ---------------------------------------------------------------------


def set_global_policy(name: str) -> str:
    """Set Keras's global dtype policy (`float32`, `mixed_float16`, `mixed_bfloat16`); return the API called."""
    if is_keras3():
        # Keras 3 (TF 2.16+): keras.config.set_dtype_policy (keras.mixed_precision.set_global_policy is an alias)
        keras.config.set_dtype_policy(name)
        return f"keras.config.set_dtype_policy({name!r})"
    # Keras 2 (TF 2.12-2.15)
    keras.mixed_precision.set_global_policy(name)
    return f"tf.keras.mixed_precision.set_global_policy({name!r})"


def compute_dtype() -> str:
    """The compute dtype of the global policy (`float32`, `float16`, `bfloat16`)."""
    if is_keras3():
        return keras.config.dtype_policy().compute_dtype
    return keras.mixed_precision.global_policy().compute_dtype


@contextlib.contextmanager
def image_data_format(fmt: str):
    """Set Keras's global image data format (read by keras.applications) for the block; restore it after."""
    backend = keras.backend
    old = backend.image_data_format()
    backend.set_image_data_format(fmt)
    try:
        yield
    finally:
        backend.set_image_data_format(old)


# --- optimizer: plain or loss-scaled ------------------------------------------------------------


def sgd(learning_rate: float, momentum: float, jit_compile: bool | None = False):
    """SGD with momentum, and the API called (keras_optimizer)."""
    return keras_optimizer("SGD", jit_compile, learning_rate=learning_rate, momentum=momentum)


def keras_optimizer(name: str, jit_compile: bool | None = False, **arguments):
    """`keras.optimizers.<name>(**arguments)` (SGD, AdamW), and the API called.

    `jit_compile` is Keras 2's own XLA compilation of the optimizer's update: False (harness's choice in the
    eager, graph and compiled modes, where only `execution` decides XLA), True (option
    tensorflow.optimizer_jit_compile), or None: Keras's default, which compiles it whenever a GPU is
    visible (what a tf_keras user gets, followed under execution: default). Keras 3's optimizers compile
    nothing themselves and take no such setting. The API names what Keras resolved (`.jit_compile`).
    """
    kind = getattr(keras.optimizers, name)
    shown = ", ".join(f"{key}={value}" for key, value in arguments.items())
    if is_keras3():
        # Keras 3 (TF 2.16+): optimizers compile nothing themselves
        return kind(**arguments), f"keras.optimizers.{name}({shown})"
    # Keras 2.11-2.15 (TF 2.12-2.15) and tf_keras: the optimizer XLA-compiles its per-variable update whenever
    # a GPU is visible (jit_compile=True by default), which would put XLA into the eager and graph modes
    if jit_compile is None:
        optimizer = kind(**arguments)
        asked = "Keras's default jit_compile"
    else:
        optimizer = kind(**arguments, jit_compile=jit_compile)
        asked = f"jit_compile={jit_compile}"
    resolved = bool(getattr(optimizer, "jit_compile", False))
    return optimizer, (f"tf.keras.optimizers.{name}({shown}, {asked}); "
                       f"the update XLA-compiled: {resolved} (optimizer.jit_compile)")


class OptimizerUpdate:
    """How one optimizer step is taken: scale the loss (identity without loss scaling), then apply.

    `apply` takes the gradients of the *scaled* loss and does any unscaling itself, so a caller can
    accumulate scaled gradients over micro-batches (the scale changes only inside `apply`).
    """

    def __init__(self, optimizer, scale: Callable[[Any], Any] | None, apply: Callable[[list, list], Any], api: str):
        self.optimizer = optimizer
        self.scale = scale or _unscaled
        self.apply = apply
        self.api = api


def _unscaled(loss):
    return loss


def optimizer_update(optimizer, variables: list, *, loss_scaling: str | None,
                     static_scale: float = STATIC_LOSS_SCALE) -> OptimizerUpdate:
    """Wrap `optimizer` for loss scaling (`dynamic`, `static` at `static_scale`, or None) and build its slots for
    `variables` eagerly.

    Building before the first tf.function trace keeps variable creation out of the traced step. The
    step functions are named, never lambdas: autograph finds a lambda's source by its line, and two
    lambdas on one line can swap (seen on TF 2.21: the scale call ran the apply lambda).
    """
    if is_keras3():
        return _keras3_update(optimizer, variables, loss_scaling, static_scale)
    return _keras2_update(optimizer, variables, loss_scaling, static_scale)


def _keras3_update(optimizer, variables: list, loss_scaling: str | None, static_scale: float) -> OptimizerUpdate:
    # Keras 3 (TF 2.16+): scale_loss(loss), then apply(grads, vars). Dynamic: LossScaleOptimizer, whose apply
    # unscales and skips the step (and lowers the scale) when a gradient is not finite. Static: Keras 3's
    # LossScaleOptimizer refuses dynamic=False and says to set the optimizer's own loss_scale_factor, whose
    # scale_loss multiplies and apply divides, with no finite check.
    if loss_scaling == "dynamic":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    elif loss_scaling == "static":
        optimizer.loss_scale_factor = float(static_scale)
    optimizer.build(variables)

    def apply(grads, vars_):
        return optimizer.apply(grads, vars_)

    if loss_scaling == "dynamic":
        return OptimizerUpdate(
            optimizer,
            optimizer.scale_loss,
            apply,
            "keras.optimizers.LossScaleOptimizer: scale_loss(loss); apply(grads, vars) unscales, skips non-finite",
        )
    if loss_scaling == "static":
        return OptimizerUpdate(
            optimizer,
            optimizer.scale_loss,
            apply,
            f"static loss scaling: the optimizer's loss_scale_factor={static_scale:g} (Keras 3's way; its "
            "LossScaleOptimizer is dynamic only): scale_loss(loss); apply(grads, vars) unscales, no finite check",
        )
    return OptimizerUpdate(optimizer, None, apply, "optimizer.apply(grads, vars)")


def _keras2_update(optimizer, variables: list, loss_scaling: str | None, static_scale: float) -> OptimizerUpdate:
    # Keras 2 (TF 2.12-2.15, tf_keras): get_scaled_loss / get_unscaled_gradients, then apply_gradients, which
    # under dynamic scaling skips the step (and lowers the scale) when a gradient is not finite; with
    # dynamic=False the scale is the constant initial_scale and apply_gradients checks nothing.
    if loss_scaling is not None:
        dynamic = loss_scaling == "dynamic"
        optimizer = (keras.mixed_precision.LossScaleOptimizer(optimizer) if dynamic else
                     keras.mixed_precision.LossScaleOptimizer(optimizer, dynamic=False,
                                                              initial_scale=float(static_scale)))
        inner = optimizer.inner_optimizer
    else:
        inner = optimizer
    if hasattr(inner, "build"):  # the Keras 2.11+ optimizers; the legacy ones create slots lazily
        inner.build(variables)
    if loss_scaling is not None:

        def apply_scaled(grads, vars_):
            return optimizer.apply_gradients(zip(optimizer.get_unscaled_gradients(grads), vars_))

        how = ("" if loss_scaling == "dynamic" else f"(dynamic=False, initial_scale={static_scale:g})")
        checked = "skips non-finite" if loss_scaling == "dynamic" else "no finite check (static)"
        return OptimizerUpdate(
            optimizer,
            optimizer.get_scaled_loss,
            apply_scaled,
            f"tf.keras.mixed_precision.LossScaleOptimizer{how}: get_scaled_loss(loss); "
            f"apply_gradients(get_unscaled_gradients(grads)) {checked}",
        )

    def apply_plain(grads, vars_):
        return optimizer.apply_gradients(zip(grads, vars_))

    return OptimizerUpdate(optimizer, None, apply_plain, "optimizer.apply_gradients(zip(grads, vars))")


def loss_scale_value(optimizer) -> float | None:
    """The current loss scale: a LossScaleOptimizer's, or a Keras 3 optimizer's static loss_scale_factor (None for a
    plain optimizer)."""
    value = getattr(optimizer, "dynamic_scale", None)  # Keras 3 (TF 2.16+)
    if value is None and is_keras3():
        value = getattr(optimizer, "loss_scale_factor", None)  # Keras 3, static
    if value is None:
        value = getattr(optimizer, "loss_scale", None)  # Keras 2 (TF 2.12-2.15)
    if value is None:
        return None
    return float(value.numpy() if hasattr(value, "numpy") else value)


# --- layouts -------------------------------------------------------------------------------------


def channels_first_cpu_problem(execution: str) -> str | None:
    """Why channels_first (NCHW) training on the CPU cannot be trusted with this Keras, or None if it can."""
    if is_keras3():
        # Keras 3 (TF 2.16+) transposes NCHW pooling to NHWC itself; NCHW convolutions run through oneDNN.
        # Checked against torchvision's logits on TF 2.21 in eager, tf.function and XLA.
        return None
    if execution == "compiled":
        return None  # XLA's own NCHW kernels: right values (checked against torchvision on TF 2.12)
    # Keras 2 (TF 2.12-2.15) hands NCHW max pooling to TF's CPU kernels
    return (
        "Keras 2 hands channels_first (NCHW) max pooling to TensorFlow's CPU kernels: on TF 2.12 (oneDNN) the "
        "eager forward returns wrong values, tf.function graphs may too, and the eager gradient kernel is "
        "NHWC-only; use channels_last, or execution=compiled (XLA), on the CPU"
    )


# --- recomputation ------------------------------------------------------------------------------


def has_remat_scope() -> bool:
    """Whether keras.RematScope exists (Keras 3.9+). Not used for recompute: see backends.tensorflow.recompute."""
    return hasattr(keras, "RematScope")


# --- devices, memory, seeds ---------------------------------------------------------------------


def device_sync() -> tuple[Callable[[], None], str]:
    """A function that waits for all queued device work, and its API name.

    tf.test.experimental.sync_devices exists from TF 2.12 (the oldest version supported); it must be
    called eagerly. The fallback only drains the eager executor's queue, not GPU streams.
    """
    sync = getattr(getattr(tf.test, "experimental", None), "sync_devices", None)
    if sync is not None:
        return sync, "tf.test.experimental.sync_devices()"
    from tensorflow.python.eager import context  # before TF 2.12

    return context.async_wait, "tensorflow.python.eager.context.async_wait() (no sync_devices in this TF)"


def reset_memory_stats(tf_device: str) -> bool:
    """Reset the allocator peak of a device (`GPU:0`, `CPU:0`); False where this TF cannot."""
    try:
        tf.config.experimental.reset_memory_stats(tf_device)
        return True
    except (ValueError, AttributeError, NotImplementedError, tf.errors.OpError):
        return False


def peak_memory_bytes(tf_device: str) -> int | None:
    """The allocator's peak bytes since the last reset (TF 2.12+ answer for GPU:N and CPU:0); None if it cannot say."""
    try:
        return int(tf.config.experimental.get_memory_info(tf_device)["peak"])
    except (ValueError, KeyError, AttributeError, NotImplementedError, tf.errors.OpError):
        return None


def set_random_seed(seed: int) -> str:
    """Seed Python, NumPy and TensorFlow (and Keras 3's own generator)."""
    keras.utils.set_random_seed(int(seed))  # Keras 2.7+ and Keras 3 alike
    return "keras.utils.set_random_seed"


def clear_session() -> None:
    """Drop Keras's global state (layer names, graphs) left by an earlier run in this process."""
    keras.backend.clear_session()
