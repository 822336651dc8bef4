"""`execution: default` on TensorFlow: what a Keras user trains with.

`model.compile(optimizer, loss)` at Keras's own defaults (Keras 3: `jit_compile="auto"`, which turns XLA on
on a GPU without a tf.distribute strategy and off on a CPU-only machine; Keras 2 / tf_keras: no XLA for the
step, the optimizer's own XLA-compiled update on a GPU; `steps_per_execution=1` in both), then
`model.fit` over a `tf.data` pipeline repeating the run's synthetic batch. One call of the timed step is
`model.fit(dataset, epochs=1, steps_per_epoch=k, verbose=0)`: k training steps, which the core times as k
steps (Prepared.steps_per_call). No callback is passed, so nothing reads a loss back per batch; fit reads
its logs once, at the end of each call, as it does at the end of a user's epoch.

The model is the workload's model part's (ResNet-50 v1.5, keras_resnet50_v1, a plugin's), the loss the part's
own or Keras's SparseCategoricalCrossentropy on the logits (the mean over every position, as the other modes
compute it; Keras 3's losses compute in float32), the optimizer Keras's own for the workload's OptimizerSpec
(backends.tensorflow.optimizer) at Keras's default jit_compile. Keras wraps it for loss scaling under
mixed_float16 by itself (compile's own default).

What model.fit cannot run as a Keras user would (grad_accum > 1, replicas > 1) is refused before a worker starts
(backends.tensorflow.fit_unsupported_reason).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from backends.tensorflow import compat
from backends.tensorflow.inputs import per_step_field
from backends.tensorflow.optimizer import keras_optimizer
from backends.tensorflow.recompute import recompute_api
from backends.tensorflow.step import part_name
from harness.seam.adapter import Prepared
from harness.workloads.host_inputs import input_pipeline
from harness.workloads.training import (
    STATIC_LOSS_SCALE,
    OptimizerSpec,
    items_per_replica_step,
    loss_scale_of,
)

#: The record's api.loss of the neutral cross-entropy under model.fit.
KERAS_CROSS_ENTROPY = "keras.losses.SparseCategoricalCrossentropy(from_logits=True) on float32 logits, mean"


def steps_per_execution(model) -> int | None:
    """The model's steps_per_execution as compile resolved it (Keras 3: an int; Keras 2: a tf.Variable)."""
    value = getattr(model, "steps_per_execution", None)
    if value is None:
        value = getattr(model, "_steps_per_execution", None)
    if value is None:
        return None
    return int(value.numpy() if hasattr(value, "numpy") else value)


def optimizer_jit_compile(optimizer) -> bool | None:
    """Whether the optimizer XLA-compiles its own update (Keras 2 / tf_keras); None where it has no such setting
    (Keras 3). Looks through a LossScaleOptimizer to the optimizer it wraps."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    value = getattr(inner, "jit_compile", None)
    return None if value is None else bool(value)


def static_loss_scaled(keras_opt) -> tuple[Any, dict[str, Any], str]:
    """`loss_scale: static` under fit: the optimizer and compile's arguments that keep Keras from wrapping it in
    its dynamic LossScaleOptimizer (which compile does by itself under mixed_float16), and the API. Keras 3: the
    optimizer's own loss_scale_factor and compile(auto_scale_loss=False); Keras 2: the optimizer passed already
    wrapped in LossScaleOptimizer(dynamic=False), which compile keeps."""
    if compat.is_keras3():
        keras_opt.loss_scale_factor = STATIC_LOSS_SCALE
        return keras_opt, {"auto_scale_loss": False}, (
            f"static loss scaling: loss_scale_factor={STATIC_LOSS_SCALE:g}, compile(auto_scale_loss=False)")
    wrapped = compat.keras.mixed_precision.LossScaleOptimizer(keras_opt, dynamic=False, initial_scale=STATIC_LOSS_SCALE)
    return wrapped, {}, f"tf.keras.mixed_precision.LossScaleOptimizer(dynamic=False, initial_scale={STATIC_LOSS_SCALE:g})"


def compile_at_defaults(model, optimizer: OptimizerSpec, loss=None, static_scaling: bool = False) -> dict[str, Any]:
    """`model.compile` with the workload's optimizer (Keras's default jit_compile) and `loss` (None: Keras's
    SparseCategoricalCrossentropy on logits), every other argument at Keras's default (but static loss scaling
    where `static_scaling`); what it resolved to: `jit_compile` (the train step under XLA),
    `steps_per_execution`, the optimizer's own `jit_compile`, and the optimizer's class (LossScaleOptimizer where
    Keras wrapped it)."""
    keras_opt, optimizer_api = keras_optimizer(optimizer, model.trainable_variables, jit_compile=None)
    arguments: dict[str, Any] = {}
    if static_scaling:
        keras_opt, arguments, static_api = static_loss_scaled(keras_opt)
        optimizer_api += f"; {static_api}"
    model.compile(optimizer=keras_opt, loss=loss or compat.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  **arguments)
    jit = getattr(model, "jit_compile", None)
    return {
        "jit_compile": bool(jit),
        "steps_per_execution": steps_per_execution(model),
        "optimizer_jit_compile": optimizer_jit_compile(model.optimizer),
        "optimizer": type(model.optimizer).__name__,
        "optimizer_api": optimizer_api,
    }


def describe(resolved: dict[str, Any], k: int) -> str:
    """The record's api.execution for the default path, naming what Keras resolved."""
    auto = "jit_compile='auto'" if compat.is_keras3() else "jit_compile at Keras 2's default (None)"
    return (f"default -> model.fit: model.compile(optimizer, loss) at Keras's defaults ({auto} -> "
            f"{resolved['jit_compile']}, steps_per_execution={resolved['steps_per_execution']}, the optimizer's "
            f"own jit_compile={resolved['optimizer_jit_compile']}); model.fit(dataset, epochs=1, "
            f"steps_per_epoch={k}, verbose=0, no callbacks) per timed call, counted as {k} steps")


class FitTraining:
    """A compiled Keras model trained by `fit`, k steps a call; its losses kept from fit's own logs."""

    def __init__(self, model, dataset, steps: int, items: tuple[str, float], inputs_fingerprint: str | None,
                 resolved: dict, expected_parameters: int | None, bytes_per_step: int | None = None):
        self.model, self.dataset, self.steps, self.items = model, dataset, steps, items
        self.inputs_fingerprint, self.resolved, self.bytes_per_step = inputs_fingerprint, resolved, bytes_per_step
        self.expected_parameters = expected_parameters
        self.losses: dict[str, float] = {}

    def step(self) -> None:
        """k training steps through model.fit; the epoch's mean loss, as fit reports it, kept."""
        history = self.model.fit(self.dataset, epochs=1, steps_per_epoch=self.steps, verbose=0)
        loss = float(history.history["loss"][-1])
        self.losses.setdefault("first", loss)
        self.losses["last"] = loss

    def checks(self) -> dict:
        """The model's parameter counts, fit's first and last losses, the inputs' fingerprint."""
        model = self.model
        count = scalars(model.trainable_weights)
        return {
            "inputs_fingerprint": self.inputs_fingerprint,
            "model_parameters": count,
            "model_parameters_total": count + scalars(model.non_trainable_weights),
            "model_parameters_expected": self.expected_parameters,
            "loss_first": self.losses.get("first"),
            "loss_last": self.losses.get("last"),
        }

    def timing_fields(self) -> dict:
        """The items of one training step and what `default` resolved to (the record's timing.fit)."""
        fit = {key: value for key, value in self.resolved.items() if key != "optimizer_api"}
        field, per_step = self.items
        out = {field: per_step, "fit": {**fit, "steps_per_epoch": self.steps}}
        scale = compat.loss_scale_value(self.model.optimizer)
        if scale is not None:
            out["loss_scale"] = scale
        if self.bytes_per_step is not None:
            out["host_to_device_bytes_per_step"] = self.bytes_per_step
        return out

    def close(self) -> None:
        """Drop fit's losses and the dataset (the model goes with the step)."""
        self.losses.clear()
        self.dataset = None


def scalars(weights) -> int:
    """How many scalars the weights hold."""
    total = 0
    for weight in weights:
        count = 1
        for dim in weight.shape:
            count *= int(dim)
        total += count
    return total


def keras_loss(part) -> tuple[Any, str]:
    """The loss model.compile takes (None: Keras's cross-entropy, compile_at_defaults) and its api.loss: the
    part's own `loss(outputs, labels)` where it has one (Keras calls a loss with the labels first)."""
    own = getattr(part, "loss", None)
    if own is None:
        return None, KERAS_CROSS_ENTROPY

    def part_loss(labels, outputs):
        return own(outputs, labels)

    return part_loss, f"the model part's own loss ({part_name(part)}.loss) in model.compile"


def prepare_fit(workload, part, params, model, inputs, options: dict, api: dict, on_gpu: bool = False) -> Prepared:
    """The default path's Prepared step: compile at Keras's defaults, `options["fit_steps"]` steps per call over
    the run's inputs (backends.tensorflow.inputs.Inputs): `inputs: host`'s tf.data pipeline, or the device batch,
    which a pipeline repeats; the optimizer, loss, inputs and execution APIs into `api`."""
    steps = int(options.get("fit_steps", 20))
    training = workload.training
    loss, loss_api = keras_loss(part)
    static = params.precision == "amp_fp16" and loss_scale_of(params) == "static"
    resolved = compile_at_defaults(model, training.optimizer(params), loss, static_scaling=static)
    api["optimizer"] = f"{resolved['optimizer_api']}; compiled by model.compile as {resolved['optimizer']}"
    api["loss"] = loss_api
    host = inputs.pipeline
    if host is None:
        # the batch is a host-side tf.data element: fit copies it to the device inside every step, not ahead
        api["input_pipeline"] = input_pipeline("device", copy_stream="compute" if on_gpu else None, copy_per_step=True)
        batch = "images" if training.images else "features"
        dataset = tf.data.Dataset.from_tensors((inputs.features, inputs.labels)).repeat()
        api["inputs"] = (f"tf.data.Dataset.from_tensors(({batch}, labels)).repeat(): the run's batch every step, "
                         "through fit's own data handler (tf.data runs its pipeline on the host, so fit copies the "
                         "batch to the device each step even with inputs: device)")
    else:
        dataset = host.dataset  # api["inputs"] already names the host pipeline
    api["execution"] = describe(resolved, steps)
    api["grad_accum"] = "1 micro-batch per optimizer update (model.fit)"
    if training.images:
        api["memory_format"] = f"keras data_format={params.memory_format!r}"
    api["recompute"] = recompute_api(params.recompute, 0, getattr(part, "block_name", "block"), under_fit=True)
    field, per_step = per_step_field(training), items_per_replica_step(workload, params)
    fitted = FitTraining(model, dataset, steps, (field, per_step), inputs.fingerprint, resolved,
                         training.parameters(params), None if host is None else host.bytes_per_step)
    return Prepared(step=fitted.step, api=api, checks=fitted.checks, timing_fields=fitted.timing_fields,
                    close=fitted.close, steps_per_call=steps)
