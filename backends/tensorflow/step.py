"""Steps as TensorFlow runs them: one optimizer update's loss and gradients (Gradients), and the neutral execution
mode (eager, graph, compiled) made a tf.function or not, on one device or through a tf.distribute strategy's `run`
for a data-parallel replica."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from typing import Callable

import tensorflow as tf

from backends.tensorflow import WHOLE_STEP_XLA_CPU, compat
from harness.errors import Unsupported

RUN_EAGERLY = "tf.config.run_functions_eagerly(True) is set in this process; tf.function would run eagerly"


def cross_entropy(outputs, labels):
    """A training workload's neutral loss: the mean softmax cross-entropy of the logits (last axis) against the
    integer labels, over every position, in float32."""
    logits = tf.cast(outputs, tf.float32)
    if logits.shape.rank != 2:
        logits = tf.reshape(logits, [-1, logits.shape[-1]])
    if labels.shape.rank != 1:
        labels = tf.reshape(labels, [-1])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def part_name(part) -> str:
    """Where a model part is defined (module and class), for the record's api (its model, its own loss)."""
    return f"{type(part).__module__}.{type(part).__qualname__}"


class Gradients:
    """One optimizer update's loss and gradients over grad_accum micro-batches, and the update: the parts of
    the training step that tf.function and XLA trace."""

    def __init__(self, model, loss: Callable, variables: list, update: compat.OptimizerUpdate, accum: int, *,
                 world: int, rotate: bool):
        self.model, self.loss, self.variables, self.update = model, loss, variables, update
        #: micro-batches per update, and replicas whose gradients the optimizer sums
        self.accum, self.world = accum, world
        #: under XLA micro-batch i is the batch rotated by i
        self.rotate = rotate

    def micro_step(self, x, y):
        """One micro-batch's loss and the gradients of its share of the update's loss."""
        with tf.GradientTape() as tape:
            loss = self.loss(self.model(x, training=True), y)
            # the mean over all grad_accum * batch_size items (of every replica: the optimizer sums the
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
            # under XLA: the same items in a rotated order, the same gradient up to rounding but not
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


@dataclass(frozen=True)
class Step:
    """A step function as it will be called in the timed loop, and how it runs (the `execution` API)."""

    call: object
    api: str
    traced: object = None  # the tf.function, where there is one

    def traces(self) -> int | None:
        """How many times the tf.function has traced (1 when it never retraced); None when eager."""
        if self.traced is None:
            return None
        return int(self.traced.experimental_get_tracing_count())


def unknown_execution(execution: str) -> Unsupported:
    """The error for an execution mode the TensorFlow backend does not map."""
    return Unsupported(f"execution {execution!r} is not one the TensorFlow backend maps (eager, graph, compiled)")


def build_step(fn, execution: str) -> Step:
    """Wrap `fn` (the whole step) for the neutral execution mode, with XLA set explicitly on or off.

    eager: the plain Python function, ops dispatched one at a time; graph: tf.function(jit_compile=False),
    run by TensorFlow's graph executor kernel by kernel; compiled: tf.function(jit_compile=True), the
    whole step compiled by XLA (on the CPU too). cuda_graph has no TensorFlow equivalent (the backend
    refuses it before this is reached).
    """
    if execution == "eager":
        return Step(fn, "eager: plain Python step, ops dispatched one by one (no tf.function)")
    if tf.config.functions_run_eagerly():
        # a tf.function would silently run eagerly: the record would name an API that did not run
        raise Unsupported(RUN_EAGERLY)
    if execution == "graph":
        traced = tf.function(fn, jit_compile=False)
        return Step(traced, "tf.function(jit_compile=False)", traced)
    if execution == "compiled":
        traced = tf.function(fn, jit_compile=True)
        return Step(traced, "tf.function(jit_compile=True)", traced)
    raise unknown_execution(execution)


def build_replica_step(compute, apply, execution: str, strategy, xla: str = "forward_backward",
                       on_gpu: bool = True) -> Step:
    """build_step for one worker of a data-parallel run. `compute(x, y)` gives (loss, gradients) of this
    replica; `apply(gradients)` is the optimizer's update, whose Keras apply all-reduces the gradients
    across the replicas (a merge_call, or a plain call where the strategy allows it). The step runs
    through strategy.run.

    compiled, `xla="forward_backward"`: XLA compiles `compute` (forward and backward, this replica's work)
    and the all-reduce and the update run in the graph around it, as torch.compile leaves DDP's all-reduce
    to DDP's hooks. A jit_compile=True function *inside* strategy.run cannot hold the update: TensorFlow
    refuses a merge_call inside a nested tf.function (TF 2.21, two H200s, 2026-11-30: "`merge_call` called
    while defining a new graph or a tf.function").
    compiled, `xla="whole_step"`: tf.function(jit_compile=True) around strategy.run itself. Traced under an
    XLA context with only GPUs, MultiWorkerMirroredStrategy skips merge_call (its `_use_merge_call`), so the
    all-reduce and the update are traced into the same XLA computation. The CPU has no XLA collectives:
    unsupported there.
    """
    whole = execution == "compiled" and xla == "whole_step"
    if whole and not on_gpu:
        raise Unsupported(WHOLE_STEP_XLA_CPU)
    inner = tf.function(compute, jit_compile=True) if execution == "compiled" and not whole else compute
    distributed_step = strategy_step(inner, apply, strategy)
    if execution == "eager":
        return Step(distributed_step, "eager: strategy.run of the plain Python step, ops dispatched one by one")
    if tf.config.functions_run_eagerly():
        raise Unsupported(RUN_EAGERLY)
    if execution == "graph":
        traced = tf.function(distributed_step, jit_compile=False)
        return Step(traced, "tf.function(jit_compile=False) around strategy.run(step)", traced)
    if execution == "compiled" and whole:
        return whole_step_xla(distributed_step, strategy)
    if execution == "compiled":
        traced = tf.function(distributed_step, jit_compile=False)
        return Step(
            traced,
            "tf.function(jit_compile=False) around strategy.run(step), the replica's forward and backward in "
            "tf.function(jit_compile=True) (XLA), the gradient all-reduce and the update outside XLA",
            inner,
        )
    raise unknown_execution(execution)


def strategy_step(compute, apply: Callable, strategy) -> Callable:
    """The step `(x, y) -> loss` of every replica through strategy.run: `compute`'s gradients, then `apply`."""

    def one_replica(x, y):
        loss, grads = compute(x, y)
        apply(grads)
        return loss

    def distributed_step(x, y):
        return strategy.run(one_replica, args=(x, y))

    return distributed_step


def whole_step_xla(distributed_step: Callable, strategy) -> Step:
    """tf.function(jit_compile=True) around strategy.run, called on the worker's device
    (tensorflow.distributed_xla=whole_step)."""
    traced = tf.function(distributed_step, jit_compile=True)
    # called without a device scope, the compiled function was placed on the worker's CPU while the mirrored
    # variables live on its GPU ("Trying to access resource ... located in device ...GPU:0 from device
    # ...CPU:0", two H200s, 2026-11-30): call it on this worker's device
    worker_device = strategy.extended.worker_devices[0]

    def placed(x, y):
        with tf.device(worker_device):
            return traced(x, y)

    return Step(
        placed,
        "tf.function(jit_compile=True) around strategy.run(step), called on the worker's device: forward, "
        "backward, the gradient all-reduce and the update in one XLA computation per replica "
        "(tensorflow.distributed_xla=whole_step)",
        traced,
    )


def xla_command_buffers() -> str:
    """What XLA_FLAGS say about XLA's CUDA-graph command buffers (XLA's default where unset)."""
    flags = os.environ.get("XLA_FLAGS") or ""
    hits = [f for f in flags.split() if "command_buffer" in f]
    return " ".join(hits) if hits else "XLA's default command buffers (XLA_FLAGS sets none)"
