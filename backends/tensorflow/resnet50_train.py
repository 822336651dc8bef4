"""resnet50_train on TensorFlow: ResNet-50 v1.5 built from Keras layers exactly as torchvision builds it.

The network is a small custom Model holding functional sub-models: the stem, 16 bottleneck blocks and
the head. Each sub-model is built (its variables created) at construction, so wrapping a block's call
in tf.recompute_grad never creates variables inside the recomputed function, and the trainable
parameter count is known before any step (25,557,032 at 1000 classes, torchvision's count).

The training step is a custom loop: tf.GradientTape over grad_accum micro-batches, SGD with momentum,
float32 logits and loss under any precision policy, dynamic loss scaling for amp_fp16.

Run on the CPU with TF 2.12 / Keras 2.12 and TF 2.21 / Keras 3.15 or tf_keras 2.21, in every execution
mode, and on an H200 with TF 2.21 (docs/benchmarks.md).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import tensorflow as tf

from backends.tensorflow import EAGER_TRAINING, FIT_DEVICE_INPUTS, compat, device
from backends.tensorflow.fit import prepare_fit
from backends.tensorflow.inputs import host_pipeline
from backends.tensorflow.step import (
    Step,
    build_replica_step,
    build_step,
    xla_command_buffers,
)
from harness.errors import Unsupported
from harness.seam.adapter import Prepared, RunContext, RunInputs
from harness.seam.distributed import collective_env
from harness.workloads.base import fingerprint
from harness.workloads.host_inputs import DEVICE_API, HostFeed
from harness.workloads.resnet50_train import (
    EXPANSION,
    STAGES,
    parameter_count,
    synthetic_batch,
)

#: The Keras dtype policy for each neutral precision (TF32 is float32 with TF32 matmul/conv on).
POLICIES = {"fp32": "float32", "tf32": "float32", "amp_fp16": "mixed_float16", "amp_bf16": "mixed_bfloat16"}

#: torchvision's BatchNorm2d defaults: eps 1e-5, momentum 0.1 (Keras counts momentum the other way).
BN_EPSILON = 1e-5
BN_MOMENTUM = 0.9

# --- the model -----------------------------------------------------------------------------------


def _layers(data_format: str):
    """Layer factories for one data format (conv without bias, torch-like BatchNorm)."""
    keras = compat.keras
    axis = 1 if data_format == "channels_first" else -1

    def conv(filters, kernel, stride=1, name=None):
        return keras.layers.Conv2D(
            filters, kernel, strides=stride, padding="valid", use_bias=False, data_format=data_format, name=name
        )

    def bn(name=None):
        return keras.layers.BatchNormalization(axis=axis, epsilon=BN_EPSILON, momentum=BN_MOMENTUM, name=name)

    def pad(amount, name=None):
        # explicit symmetric padding, then a 'valid' conv or pool: what torch's padding=k does. Keras's
        # 'same' pads a strided conv asymmetrically (0 before, 1 after), which shifts every window.
        return keras.layers.ZeroPadding2D(amount, data_format=data_format, name=name)

    return keras, axis, conv, bn, pad


def _stem(input_shape, dtype: str, data_format: str):
    """conv 7x7/2 (64, no bias) + BN + ReLU + max pool 3x3/2, padded like torchvision."""
    keras, _, conv, bn, pad = _layers(data_format)
    x = inputs = keras.Input(shape=input_shape, dtype=dtype, name="images")
    x = pad(3, name="conv1_pad")(x)
    x = conv(64, 7, 2, name="conv1")(x)
    x = bn(name="bn1")(x)
    x = keras.layers.ReLU(name="relu")(x)
    # torch pads the max pool with -inf; after the ReLU every value is >= 0, so zeros pick the same max
    x = pad(1, name="pool_pad")(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="valid", data_format=data_format, name="maxpool")(x)
    return keras.Model(inputs, x, name="stem")


def _bottleneck(input_shape, dtype: str, width: int, stride: int, project: bool, data_format: str, name: str):
    """torchvision's Bottleneck (v1.5: the stride is on the 3x3 conv), projection shortcut when `project`."""
    keras, _, conv, bn, pad = _layers(data_format)
    x = inputs = keras.Input(shape=input_shape, dtype=dtype, name=f"{name}_in")
    y = conv(width, 1, name=f"{name}_conv1")(x)
    y = bn(name=f"{name}_bn1")(y)
    y = keras.layers.ReLU(name=f"{name}_relu1")(y)
    y = pad(1, name=f"{name}_pad2")(y)
    y = conv(width, 3, stride, name=f"{name}_conv2")(y)
    y = bn(name=f"{name}_bn2")(y)
    y = keras.layers.ReLU(name=f"{name}_relu2")(y)
    y = conv(width * EXPANSION, 1, name=f"{name}_conv3")(y)
    y = bn(name=f"{name}_bn3")(y)
    if project:
        shortcut = conv(width * EXPANSION, 1, stride, name=f"{name}_downsample_conv")(x)
        shortcut = bn(name=f"{name}_downsample_bn")(shortcut)
    else:
        shortcut = x
    y = keras.layers.Add(name=f"{name}_add")([y, shortcut])
    y = keras.layers.ReLU(name=f"{name}_out")(y)
    return keras.Model(inputs, y, name=name)


def _head(input_shape, dtype: str, num_classes: int, data_format: str):
    """Global average pool + Dense, whose logits are float32 under every policy (the loss is computed on them)."""
    keras = compat.keras
    x = inputs = keras.Input(shape=input_shape, dtype=dtype, name="features")
    x = keras.layers.GlobalAveragePooling2D(data_format=data_format, name="avgpool")(x)
    x = keras.layers.Dense(num_classes, dtype="float32", name="fc")(x)
    return keras.Model(inputs, x, name="head")


def _output_shape(model) -> tuple:
    shape = model.output_shape if hasattr(model, "output_shape") else model.outputs[0].shape
    return tuple(int(d) for d in shape[1:])


def build_resnet50(image_size: int, num_classes: int, data_format: str, recompute: bool):
    """ResNet-50 v1.5 as torchvision builds it, from Keras layers, in the current dtype policy.

    With `recompute`, every bottleneck block's call is wrapped in tf.recompute_grad: its activations
    are dropped after the forward pass and recomputed in the backward pass.
    """
    keras = compat.keras
    dtype = compat.compute_dtype()
    input_shape = (3, image_size, image_size) if data_format == "channels_first" else (image_size, image_size, 3)
    stem = _stem(input_shape, dtype, data_format)
    shape = _output_shape(stem)
    blocks = []
    in_channels = 64
    for stage, (width, count, stride) in enumerate(STAGES, start=1):
        for index in range(count):
            first = index == 0
            block = _bottleneck(
                shape,
                dtype,
                width,
                stride if first else 1,
                first and (stride != 1 or in_channels != width * EXPANSION),
                data_format,
                name=f"layer{stage}_{index}",
            )
            blocks.append(block)
            shape = _output_shape(block)
            in_channels = width * EXPANSION
    head = _head(shape, dtype, num_classes, data_format)

    class ResNet50(keras.Model):
        """stem -> 16 bottleneck blocks (each optionally recomputed) -> head."""

        def __init__(self):
            super().__init__(name="resnet50_v1_5")
            self.stem = stem
            self.blocks = blocks
            self.head = head
            self.recompute = recompute

        def call(self, x, training=False):
            x = self.stem(x, training=training)
            for block in self.blocks:
                if self.recompute:
                    x = tf.recompute_grad(partial(_call_block, block, training=training))(x)
                else:
                    x = block(x, training=training)
            return self.head(x, training=training)

    return ResNet50()


def _call_block(block, x, training):
    return block(x, training=training)


def build_keras_resnet50_v1(image_size: int, num_classes: int, data_format: str):
    """keras.applications.ResNet50 (v1: stride on the 1x1 conv, conv bias), untrained, returning logits."""
    keras = compat.keras
    input_shape = (3, image_size, image_size) if data_format == "channels_first" else (image_size, image_size, 3)
    with compat.image_data_format(data_format):  # keras.applications reads the global format
        return keras.applications.ResNet50(
            weights=None, classes=num_classes, input_shape=input_shape, classifier_activation=None
        )


def trainable_parameters(model) -> int:
    """Number of trainable scalars (BatchNorm gamma and beta included, moving statistics not)."""
    return int(sum(int(np.prod(v.shape)) for v in model.trainable_weights))


# --- the run -------------------------------------------------------------------------------------


def prepare(params, dev, run: RunInputs) -> Prepared:
    """The model in the precision's policy, synthetic data on the device, SGD, and one training step."""
    api = {"keras": compat.keras_api()}
    api["precision"] = device.set_tensor_float_32(params.precision, dev.placement)
    if params.memory_format == "channels_first" and not dev.placement.is_gpu:
        problem = compat.channels_first_cpu_problem(params.execution)
        if problem:
            raise Unsupported(problem)
    model = build_model(params, dev, run.seed, api)
    variables = model.trainable_variables
    inputs = build_inputs(params, dev, run)
    api["inputs"] = inputs.api
    if params.execution == "default":  # Keras's model.fit at its own defaults (backends.tensorflow.fit)
        add_warnings(params, dev.placement, run.ctx)
        return prepare_fit(params, model, inputs, run.options, api)
    update = build_optimizer(params, variables, api, run.options.get("optimizer_jit_compile", False))
    add_warnings(params, dev.placement, run.ctx)
    replica = run.replica
    gradients = Gradients(model, variables, update, params.grad_accum,
                          world=replica.world_size if replica is not None else 1, rotate=params.execution == "compiled")
    step_fn = build_training_step(gradients, params, dev, run, inputs.in_process, api)
    training = Training(params, model, step_fn, inputs, dev, run.ctx, update)
    return Prepared(step=training.step, api=api, checks=training.checks, timing_fields=training.timing_fields,
                    distributed=distributed_fields(dev, inputs.in_process) if inputs.strategy is not None else None)


def build_model(params, dev, seed: int, api: dict):
    """The Keras model of `params.model`, built under the precision's global policy from a fresh Keras state
    seeded with `seed`; puts the policy and the model's API into `api`."""
    if dev.strategy is None:  # a replica's process is fresh, and clearing would drop strategy.scope()
        compat.clear_session()
    gc.collect()  # an earlier run's model in this process would otherwise count in the allocator peak
    compat.set_random_seed(seed)
    # the policy is global and read when layers are created: set it (float32 too) before building
    api["precision"] = compat.set_global_policy(POLICIES[params.precision]) + "; " + api["precision"]
    if params.model == "resnet50":
        model = build_resnet50(params.image_size, params.num_classes, params.memory_format, params.recompute == "blocks")
        api["model"] = "ResNet-50 v1.5 from Keras layers (torchvision layout: stride on 3x3, no conv bias)"
    else:
        model = build_keras_resnet50_v1(params.image_size, params.num_classes, params.memory_format)
        api["model"] = "keras.applications.ResNet50(weights=None, classifier_activation=None) (v1, conv bias)"
    return model


@dataclass
class Inputs:
    """The synthetic batch on the device, as the step takes it, and what says where it came from."""

    images: Any
    labels: Any
    #: the batch read back in the neutral layout and hashed; None for a capacity probe
    fingerprint: str | None
    #: the data-parallel strategy of this replica's device; None: a plain run
    strategy: Any
    #: TensorFlow's names of the devices this process holds replicas on (MirroredStrategy); [] otherwise
    in_process: list[str]
    #: the record's api.inputs
    api: str = DEVICE_API
    #: inputs: host, the tf.data pipeline a step reads its batch from; None: every step reads images, labels
    pipeline: HostFeed | None = None

    def next(self) -> tuple[Any, Any]:
        """The (images, labels) the next step consumes."""
        return self.pipeline.next() if self.pipeline is not None else (self.images, self.labels)


def build_inputs(params, dev, run: RunInputs) -> Inputs:
    """This replica's synthetic batch as tensors, fingerprinted; under MirroredStrategy each replica's own batch
    on its own device, handed to each replica by strategy.run."""
    if getattr(params, "inputs", "device") == "host":  # replicas: 1 only (refused in the plan otherwise)
        pipeline = host_pipeline(params, dev.placement, run)
        return Inputs(None, None, pipeline.fingerprint, None, [], pipeline.api, pipeline)
    replica = run.replica
    channels_last = params.memory_format == "channels_last"
    images_host, labels_host = synthetic_batch(params, run.seed, 0 if replica is None else replica.rank,
                                               channels_last=channels_last, probe=run.probe)
    images = tf.constant(images_host)
    labels = tf.constant(labels_host)
    del images_host, labels_host
    # what reached the device, read back in the neutral (NCHW) layout: equal on two backends means equal
    # inputs. A capacity probe skips it (compared with nothing; seconds of copying and hashing at its batches)
    inputs_fingerprint = None
    if not run.probe:
        images_back = images.numpy()
        if channels_last:
            images_back = images_back.transpose(0, 3, 1, 2)
        inputs_fingerprint = fingerprint(images_back, labels.numpy())
        del images_back
    strategy = dev.strategy if replica is not None else None
    in_process = list(dev.tf_devices) if strategy is not None else []
    if len(in_process) > 1:
        images, labels = mirrored_batches(params, run, images, labels, strategy, in_process)
    return Inputs(images, labels, inputs_fingerprint, strategy, in_process)


def mirrored_batches(params, run: RunInputs, images, labels, strategy, in_process: list[str]):
    """MirroredStrategy: this process holds every replica. Replica i trains on rank i's images (as the worker
    of rank i would), placed on its own device; the distributed values hand each replica its own."""
    per_replica = []
    for i, tf_device in enumerate(in_process):
        if i == 0:
            with tf.device(tf_device):
                per_replica.append((tf.identity(images), tf.identity(labels)))
            continue
        x_host, y_host = synthetic_batch(params, run.seed, run.replica.rank + i,
                                         channels_last=params.memory_format == "channels_last", probe=run.probe)
        with tf.device(tf_device):
            per_replica.append((tf.constant(x_host), tf.constant(y_host)))
        del x_host, y_host
    del images, labels
    return (strategy.experimental_distribute_values_from_function(partial(_replica_part, per_replica, 0)),
            strategy.experimental_distribute_values_from_function(partial(_replica_part, per_replica, 1)))


def _replica_part(per_replica: list, part: int, context):
    """The images (part 0) or labels (part 1) of the replica `context` is in."""
    return per_replica[context.replica_id_in_sync_group][part]


def build_optimizer(params, variables: list, api: dict, jit_compile: bool = False) -> compat.OptimizerUpdate:
    """SGD with momentum over `variables` (loss scaling under amp_fp16; Keras 2's own XLA update only with
    `jit_compile`, option tensorflow.optimizer_jit_compile); puts its API, and the layout, recompute and loss
    APIs, into `api`."""
    optimizer, sgd_api = compat.sgd(params.lr, params.momentum, jit_compile)
    update = compat.optimizer_update(optimizer, variables, loss_scaling=params.precision == "amp_fp16")
    if params.precision == "amp_fp16":
        api["precision"] += "; " + update.api
    data_format = params.memory_format
    api["memory_format"] = (
        f"keras data_format={data_format!r}" + (" (input transposed NCHW -> NHWC)" if data_format == "channels_last" else "")
    )
    api["recompute"] = (
        f"tf.recompute_grad around each of the {sum(count for _, count, _ in STAGES)} bottleneck blocks"
        if params.recompute == "blocks"
        else "none"
    )
    api["optimizer"] = f"{sgd_api}; {update.api}"
    api["loss"] = "tf.nn.sparse_softmax_cross_entropy_with_logits on float32 logits, mean"
    return update


def add_warnings(params, placement: device.Placement, ctx: RunContext) -> None:
    """The record's warnings about what this configuration measures (float16 on the CPU, eager training, fit's
    copy of a device batch on a GPU)."""
    if params.precision == "amp_fp16" and not placement.is_gpu:
        ctx.warnings.append("float16 on the CPU runs TensorFlow's slow reference kernels: not a guide to any GPU")
    if params.execution == "eager":
        ctx.warnings.append(EAGER_TRAINING)
    if params.execution == "default" and placement.is_gpu and getattr(params, "inputs", "device") == "device":
        ctx.warnings.append(FIT_DEVICE_INPUTS)


class Gradients:
    """One optimizer update's loss and gradients over grad_accum micro-batches, and the update: the parts of
    the training step that tf.function and XLA trace."""

    def __init__(self, model, variables: list, update: compat.OptimizerUpdate, accum: int, *, world: int,
                 rotate: bool):
        self.model, self.variables, self.update = model, variables, update
        #: micro-batches per update, and replicas whose gradients the optimizer sums
        self.accum, self.world = accum, world
        #: under XLA micro-batch i is the batch rotated by i
        self.rotate = rotate

    def micro_step(self, x, y):
        """One micro-batch's loss and the gradients of its share of the update's loss."""
        with tf.GradientTape() as tape:
            logits = tf.cast(self.model(x, training=True), tf.float32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            # the mean over all grad_accum * batch_size images (of every replica: the optimizer sums the
            # replicas' gradients), as one large batch would give
            scaled = self.update.scale(loss / (self.accum * self.world))
        return loss, tape.gradient(scaled, self.variables)

    def compute(self, x, y):
        """Loss and gradients of one optimizer update (grad_accum micro-batches), before the update."""
        loss, grads = self.micro_step(x, y)
        if self.accum > 1:
            # a loop, not unrolled Python: the traced graph (and XLA's compile time) stays one micro-step
            # long; parallel_iterations=1 keeps micro-batches from overlapping and raising the peak
            _, loss, grads = tf.while_loop(
                self._more, partial(self._accumulate, x, y), (tf.constant(1), loss, grads), parallel_iterations=1
            )
        return loss, grads

    def _more(self, i, *_):
        return i < self.accum

    def _accumulate(self, x, y, i, loss, grads):
        xi, yi = x, y
        if self.rotate:
            # under XLA: the same images in a rotated order, the same gradient up to rounding but not
            # provably the same computation, so XLA cannot hoist it out of the loop and compute it once
            xi, yi = tf.roll(x, i, axis=0), tf.roll(y, i, axis=0)
        loss, more = self.micro_step(xi, yi)
        return i + 1, loss, [g + m for g, m in zip(grads, more)]

    def apply(self, grads) -> None:
        """The optimizer's update with the gradients of the scaled loss."""
        self.update.apply(grads, self.variables)

    def train_step(self, x, y):
        """The whole step on one device: compute, then apply; the last micro-batch's loss."""
        loss, grads = self.compute(x, y)
        self.apply(grads)
        return loss


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


class Training:
    """A built training run: the timed step, and what is read after the timed region."""

    def __init__(self, params, model, step_fn: Step, inputs: Inputs, dev, ctx: RunContext,
                 update: compat.OptimizerUpdate):
        self.params, self.model, self.step_fn, self.inputs = params, model, step_fn, inputs
        self.placement, self.ctx, self.update = dev.placement, ctx, update
        self.losses: dict = {}

    def step(self) -> None:
        """One training step; its loss kept (read as a number only after the timed region)."""
        try:
            loss = self.step_fn.call(*self.inputs.next())
            if self.inputs.strategy is not None:  # this worker's one replica's loss
                loss = self.inputs.strategy.experimental_local_results(loss)[0]
        except (tf.errors.UnimplementedError, tf.errors.InvalidArgumentError) as exc:
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
            "model_parameters_expected": parameter_count(params.num_classes, params.model),
            "loss_first": float(self.losses["first"].numpy()),
            "loss_last": float(self.losses["last"].numpy()),
            # equal on every replica of a data-parallel run: the all-reduced updates kept the weights identical
            "parameters_sum": float(sum(float(np.sum(np.asarray(v.numpy(), dtype=np.float64))) for v in model.trainable_variables)),
        }

    def timing_fields(self) -> dict:
        """The tf.function's trace count, the images of one step, and the loss scale under amp_fp16."""
        out = {"traces": self.step_fn.traces(), "images_per_step": float(self.params.batch_size * self.params.grad_accum)}
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
