"""The TensorFlow trainer: any training workload (harness.workloads.training) with its Keras model part.

The workload says what is trained (its seeded batches, optimizer, loss, parameter count); its part builds the
Keras model with the Keras in use (Keras 3 or tf_keras, handed in as BuildContext.framework). This module owns
how a step runs: the precision's global dtype policy (dynamic loss scaling for amp_fp16, the loss on float32
logits), the execution mode (a custom loop under tf.GradientTape, eager, in tf.function or under XLA; Keras's
model.fit for `default`: backends.tensorflow.fit), recomputation (tf.recompute_grad around each block the part
passes through ctx.block: backends.tensorflow.recompute), gradient accumulation, the optimizer of the workload's
OptimizerSpec (backends.tensorflow.optimizer), the inputs (backends.tensorflow.inputs), data parallel through the
replica's tf.distribute strategy, and the record's checks and api.

Run on the CPU with TF 2.12 / Keras 2.12 and TF 2.21 / Keras 3.15 or tf_keras 2.21, in every execution
mode, and on an H200 with TF 2.21 (docs/benchmarks.md).
"""

from __future__ import annotations

import gc

import numpy as np
import tensorflow as tf

from backends.tensorflow import EAGER_TRAINING, FIT_DEVICE_INPUTS, compat, device
from backends.tensorflow.fit import prepare_fit
from backends.tensorflow.inputs import Inputs, build_inputs, per_step_field
from backends.tensorflow.optimizer import keras_optimizer
from backends.tensorflow.recompute import recompute_api, recomputed
from backends.tensorflow.step import (
    Gradients,
    Step,
    build_replica_step,
    build_step,
    cross_entropy,
    part_name,
    xla_command_buffers,
)
from harness.errors import Unsupported
from harness.seam.adapter import Prepared, RunContext, RunInputs
from harness.seam.distributed import collective_env
from harness.workloads.training import (
    BuildContext,
    items_per_replica_step,
    loss_scale_of,
    part_api,
)

#: The Keras dtype policy for each neutral precision (TF32 is float32 with TF32 matmul/conv on).
POLICIES = {"fp32": "float32", "tf32": "float32", "amp_fp16": "mixed_float16", "amp_bf16": "mixed_bfloat16"}

#: The record's api.loss of the neutral cross-entropy (backends.tensorflow.step.cross_entropy).
CROSS_ENTROPY = "tf.nn.sparse_softmax_cross_entropy_with_logits on float32 logits, mean"


def prepare(workload, part, params, dev, run: RunInputs) -> Prepared:
    """The part's model in the precision's policy, the workload's batches on the device, its optimizer, and one
    training step in the execution mode (model.fit for `default`)."""
    images = workload.training.images
    api = {"keras": compat.keras_api()}
    api["precision"] = device.set_tensor_float_32(params.precision, dev.placement)
    if images and params.memory_format == "channels_first" and not dev.placement.is_gpu:
        problem = compat.channels_first_cpu_problem(params.execution)
        if problem:
            raise Unsupported(problem)
    model, ctx = build_model(part, params, dev, run.seed, api)
    if getattr(part, "classifier", None):
        api["classifier"] = part.classifier
    inputs = build_inputs(workload.training, params, dev, run)
    api["inputs"], api["input_pipeline"] = inputs.api, inputs.fields
    add_warnings(params, dev.placement, run.ctx)
    if params.execution == "default":  # Keras's model.fit at its own defaults (backends.tensorflow.fit)
        return prepare_fit(workload, part, params, model, inputs, run.options, api, dev.placement.is_gpu)
    variables = model.trainable_variables
    update, api_optimizer = build_optimizer(workload.training.optimizer(params), params, variables, api,
                                            run.options.get("optimizer_jit_compile", False))
    if images:
        transposed = " (input transposed NCHW -> NHWC)" if params.memory_format == "channels_last" else ""
        api["memory_format"] = f"keras data_format={params.memory_format!r}{transposed}"
    api["recompute"] = recompute_api(params.recompute, ctx.blocks, getattr(part, "block_name", "block"))
    api["optimizer"] = api_optimizer
    loss = getattr(part, "loss", None)
    api["loss"] = CROSS_ENTROPY if loss is None else f"the model part's own loss ({part_name(part)}.loss)"
    replica = run.replica
    gradients = Gradients(model, loss or cross_entropy, variables, update, params.grad_accum,
                          world=replica.world_size if replica is not None else 1, rotate=params.execution == "compiled")
    step_fn = build_training_step(gradients, params, dev, run, inputs.in_process, api)
    training = Training(workload, params, model, step_fn, inputs, dev, run.ctx, update)
    return Prepared(step=training.step, api=api, checks=training.checks, timing_fields=training.timing_fields,
                    distributed=distributed_fields(dev, inputs.in_process) if inputs.strategy is not None else None)


def build_model(part, params, dev, seed: int, api: dict):
    """The part's Keras model, built under the precision's global policy from a fresh Keras state seeded with
    `seed`, and the BuildContext it was built with (its blocks counted); the policy and the model into `api`."""
    if dev.strategy is None:  # a replica's process is fresh, and clearing would drop strategy.scope()
        compat.clear_session()
    gc.collect()  # an earlier run's model in this process would otherwise count in the allocator peak
    compat.set_random_seed(seed)
    # the policy is global and read when layers are created: set it (float32 too) before building
    api["precision"] = compat.set_global_policy(POLICIES[params.precision]) + "; " + api["precision"]
    ctx = BuildContext(seed=seed, framework=compat.keras, layout=getattr(params, "memory_format", "channels_first"),
                       precision=params.precision)
    if params.recompute == "blocks":
        ctx.recompute = recomputed
    model = part.build(params, ctx)
    describe = getattr(part, "describe", None)
    api["model"] = describe(params) if describe is not None else (
        f"{type(model).__name__} {model.name!r} from the model part {part_name(part)}")
    api.update(part_api(part, params))
    return model, ctx


def build_optimizer(spec, params, variables: list, api: dict,
                    jit_compile: bool = False) -> tuple[compat.OptimizerUpdate, str]:
    """The workload's optimizer over `variables` (loss scaling under amp_fp16; Keras 2's own XLA update only with
    `jit_compile`, option tensorflow.optimizer_jit_compile), its slots built, and the record's api.optimizer; the
    loss scaling into `api`."""
    optimizer, optimizer_api = keras_optimizer(spec, variables, jit_compile)
    scaling = loss_scale_of(params) if params.precision == "amp_fp16" else None
    update = compat.optimizer_update(optimizer, variables, loss_scaling=scaling)
    if params.precision == "amp_fp16":
        api["precision"] += "; " + update.api
    return update, f"{optimizer_api}; {update.api}"


def add_warnings(params, placement: device.Placement, ctx: RunContext) -> None:
    """The record's warnings about what this configuration measures (float16 on the CPU, eager training, fit's
    copy of a device batch on a GPU)."""
    if params.precision == "amp_fp16" and not placement.is_gpu:
        ctx.warnings.append("float16 on the CPU runs TensorFlow's slow reference kernels: not a guide to any GPU")
    if params.execution == "eager":
        ctx.warnings.append(EAGER_TRAINING)
    if params.execution == "default" and placement.is_gpu and getattr(params, "inputs", "device") == "device":
        ctx.warnings.append(FIT_DEVICE_INPUTS)


def build_training_step(gradients: Gradients, params, dev, run: RunInputs, in_process: list[str], api: dict) -> Step:
    """The training step in the execution mode, through the replica's strategy where there is one; puts the
    execution, distribution and grad_accum APIs into `api`."""
    accum = params.grad_accum
    if run.replica is not None and dev.strategy is not None:
        step_fn = build_replica_step(gradients.compute, gradients.apply, params.execution, dev.strategy,
                                     run.options.get("distributed_xla", "forward_backward"), dev.placement.is_gpu)
        world = run.replica.world_size
        if len(in_process) > 1:
            api["distribution"] = (f"tf.distribute.MirroredStrategy, {world} replicas in one process on "
                                   f"{', '.join(in_process)} ({dev.allreduce['implementation']})")
        else:
            api["distribution"] = (f"tf.distribute.MultiWorkerMirroredStrategy, {world} worker processes, one replica "
                                   f"each ({dev.allreduce['implementation']}, bytes_per_pack={dev.allreduce['bytes_per_pack']})")
        api["allreduce"] = ", ".join(f"{k}={v}" for k, v in dev.allreduce.items())
    else:
        step_fn = build_step(gradients.train_step, params.execution)
    api["execution"] = step_fn.api + " of the whole step: forward, tf.GradientTape backward, optimizer update"
    if params.execution == "compiled" and dev.placement.is_gpu:
        api["execution"] += f"; {xla_command_buffers()}"
    api["grad_accum"] = (
        f"{accum} micro-batch(es) of {params.batch_size} per optimizer update, loss / {accum}, gradients summed"
        + (" in tf.while_loop" if accum > 1 else "")
        + ("; under XLA micro-batch i is the batch rotated by i (tf.roll), so XLA cannot compute it once"
           if accum > 1 and gradients.rotate else "")
    )
    return step_fn


def trainable_parameters(model) -> int:
    """Number of trainable scalars (BatchNorm gamma and beta included, moving statistics not)."""
    return int(sum(int(np.prod(v.shape)) for v in model.trainable_weights))


class Training:
    """A built training run: the timed step, and what is read after the timed region."""

    def __init__(self, workload, params, model, step_fn: Step, inputs: Inputs, dev, ctx: RunContext,
                 update: compat.OptimizerUpdate):
        self.workload, self.params, self.model, self.step_fn, self.inputs = workload, params, model, step_fn, inputs
        self.placement, self.ctx, self.update = dev.placement, ctx, update
        self.losses: dict = {}

    def step(self) -> None:
        """One training step; its loss kept (read as a number only after the timed region)."""
        try:
            loss = self.step_fn.call(*self.inputs.next())
            if self.inputs.strategy is not None:  # this worker's one replica's loss
                loss = self.inputs.strategy.experimental_local_results(loss)[0]
        except (tf.errors.UnimplementedError, tf.errors.InvalidArgumentError) as exc:
            if self.workload.training.images:
                _raise_if_layout_unsupported(exc, self.params.memory_format, self.placement)
            raise
        self.losses.setdefault("first", loss)
        self.losses["last"] = loss

    def checks(self) -> dict:
        """The model's parameter counts, the first and last losses, the inputs' fingerprint; a warning when the
        step retraced."""
        params, model = self.params, self.model
        count = trainable_parameters(model)
        traces = self.step_fn.traces()
        in_process = self.inputs.in_process
        # under XLA with MirroredStrategy the compiled forward-backward is traced once per replica's device
        expected = len(in_process) if len(in_process) > 1 and params.execution == "compiled" else 1
        if traces is not None and traces > expected:
            self.ctx.warnings.append(f"the tf.function training step traced {traces} times (expected "
                                     f"{'once' if expected == 1 else f'{expected} times, once per replica'})")
        return {
            "inputs_fingerprint": self.inputs.fingerprint,
            "model_parameters": count,
            "model_parameters_total": count + int(sum(int(np.prod(v.shape)) for v in model.non_trainable_weights)),
            "model_parameters_expected": self.workload.training.parameters(params),
            "loss_first": float(self.losses["first"].numpy()),
            "loss_last": float(self.losses["last"].numpy()),
            # equal on every replica of a data-parallel run: the all-reduced updates kept the weights identical
            "parameters_sum": float(sum(float(np.sum(np.asarray(v.numpy(), dtype=np.float64))) for v in model.trainable_variables)),
        }

    def timing_fields(self) -> dict:
        """The tf.function's trace count, the items of one step, and the loss scale under amp_fp16."""
        items = items_per_replica_step(self.workload, self.params)
        out = {"traces": self.step_fn.traces(), per_step_field(self.workload.training): items}
        if self.inputs.pipeline is not None:
            out["host_to_device_bytes_per_step"] = self.inputs.pipeline.bytes_per_step
        if self.params.precision == "amp_fp16":
            out["loss_scale"] = compat.loss_scale_value(self.update.optimizer)
        return out


def distributed_fields(dev, in_process: list[str]) -> dict:
    """A data-parallel replica's `distributed` record fields: the all-reduce's settings and environment."""
    return {"allreduce": {**dev.allreduce, "env": {k: v for k, v in collective_env().items() if k != "TF_CONFIG"}},
            "replicas_in_process": max(1, len(in_process))}


def _raise_if_layout_unsupported(exc: Exception, data_format: str, placement: device.Placement) -> None:
    """Turn TF's "only NHWC on the CPU" kernel errors into Unsupported (e.g. TF_ENABLE_ONEDNN_OPTS=0's NCHW conv)."""
    message = str(exc)
    if data_format == "channels_first" and not placement.is_gpu and "NHWC" in message:
        first_line = next((line for line in message.splitlines() if "NHWC" in line), message).strip()
        raise Unsupported(
            f"TensorFlow cannot run channels_first (NCHW) training on the CPU in this mode: {first_line}"
        ) from exc
