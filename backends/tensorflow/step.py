"""Steps as TensorFlow runs them: the neutral execution mode (eager, graph, compiled) made a tf.function or
not, on one device or through a tf.distribute strategy's `run` for a data-parallel replica."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import tensorflow as tf

from backends.tensorflow import WHOLE_STEP_XLA_CPU
from harness.errors import Unsupported

RUN_EAGERLY = "tf.config.run_functions_eagerly(True) is set in this process; tf.function would run eagerly"


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
