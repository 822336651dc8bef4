"""One training step on torch, and the execution modes around it: eager (and `default`, the same plain Python
step), a whole-step CUDA graph captured once and replayed, and torch.compile (of the whole step, or of the model
in the modes that replay CUDA graphs).

One step is `grad_accum` micro-batches (forward, loss, backward) and one optimizer step.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

import torch
import torch.nn.functional as F

from backends.torch import compat
from backends.torch.inputs import Feed
from backends.torch.optimizer import momentum_buffers_ready
from backends.torch.precision import Amp, unscale_gradients
from harness.errors import Unsupported
from harness.seam.adapter import RunInputs

#: torch.compile modes that capture the compiled graphs in CUDA graphs (torch's docs: reduce-overhead, max-autotune)
CUDA_GRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")

#: Training steps run on a side stream before a whole-step CUDA graph is captured.
GRAPH_WARMUP_STEPS = 3


def make_train_step(p, net, part_loss: Callable[[Any, Any], Any] | None, optimizer,
                    amp: Amp) -> Callable[[Any, Any], Any]:
    """The training step of `net` (the model, or its compiled form) on a batch (features, labels): one optimizer
    step of grad_accum micro-batches under autocast, returning the last micro-batch's loss (unscaled). The loss is
    the part's own `loss(outputs, labels)` where it has one, else the workload's neutral one: the mean softmax
    cross-entropy of the outputs (classes on the last axis) against integer labels over every position, which
    autocast computes in float32 (cross_entropy is on its float32 list). Loss scaling: GradScaler's (dynamic), or
    the static constant's (loss x scale, gradients x 1/scale before step(), nothing read on the host)."""
    accum, autocast, scaler, static = p.grad_accum, amp.autocast, amp.scaler, amp.static_scale
    parameters = [t for group in optimizer.param_groups for t in group["params"]] if static is not None else []

    def train_step(features, labels):
        optimizer.zero_grad(set_to_none=True)
        loss = None
        for _ in range(accum):
            with autocast():
                outputs = net(features)
                # the neutral loss is called here, not in a helper of the backend's: torch.compile falls back to
                # eager for this step (it breaks its graph at backward) and compiles the Python functions it calls,
                # so a helper would compile the loss that the step has always run eagerly
                loss = (part_loss(outputs, labels) if part_loss is not None
                        else F.cross_entropy(outputs, labels) if outputs.dim() == 2
                        else F.cross_entropy(outputs.flatten(0, -2), labels.flatten()))
            backward_loss = loss / accum if accum > 1 else loss
            if scaler is not None:
                scaler.scale(backward_loss).backward()
            elif static is not None:
                (backward_loss * static).backward()
            else:
                backward_loss.backward()
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            if static is not None:
                unscale_gradients(parameters, static)
            optimizer.step()
        return loss.detach()

    return train_step


def compile_mode(p, run: RunInputs) -> str | None:
    """torch.compile's mode under execution compiled (None otherwise); Unsupported for grad_accum > 1 under a
    mode that replays CUDA graphs.

    CUDA-graph compile modes replay each compiled graph into the same output memory, so a compiled
    optimizer step that reads the gradients (outputs of the backward's graph) across graph breaks trips
    over overwritten outputs (torch 2.11 on an H200, 2026-11-30: "accessing tensor output of CUDAGraphs
    that has been overwritten", in SGD's first step, even with cudagraph_mark_step_begin per step).
    These modes compile the model (forward and, through AOTAutograd, backward) and leave
    optimizer.step() eager: the documented way to use them for training.
    """
    mode = run.options.get("compile_mode", "default") if p.execution == "compiled" else None
    if mode in CUDA_GRAPH_COMPILE_MODES and p.grad_accum > 1:
        raise Unsupported(
            f"grad_accum > 1 under torch.compile mode {mode!r} (CUDA graphs): the micro-batches' backward calls "
            "accumulate into gradients that are outputs of a replayed CUDA graph, which torch refuses "
            "(pytorch/pytorch#169545); use compile_mode default or max-autotune-no-cudagraphs"
        )
    return mode


def build_step(execution: str, mode: str | None, train_step: Callable[[Any, Any], Any], optimizer, losses: dict,
               api: dict, feed: Feed) -> Callable[[], None]:
    """The timed step in the execution mode on the feed's next batch, keeping the first and last losses in
    `losses`; its API into `api`."""
    if execution == "cuda_graph":
        api["execution"] = "torch.cuda.CUDAGraph of the whole step (forward, loss, backward, optimizer.step), replayed"
        if feed.refill is not None:
            # a graph replays fixed input addresses: each step copies its batch into the captured input tensors
            api["execution"] += "; each step's host batch copied into the graph's static inputs (copy_, non_blocking)"
        return graph_replay_step(train_step, optimizer, losses, feed)
    model_only = mode in CUDA_GRAPH_COMPILE_MODES
    whole_step = train_step
    if execution == "compiled" and model_only:
        api["execution"] = (f"torch.compile(model, mode={mode}): forward and backward (AOTAutograd) compiled and "
                            "replayed as CUDA graphs; loss and optimizer.step() eager")
    elif execution == "compiled":
        momentum_buffers_ready(optimizer, api)
        whole_step = compat.torch_compile(train_step, mode=mode)
        api["execution"] = (f"torch.compile(mode={mode}) of the whole step: forward, loss, backward (AOTAutograd) "
                            "and optimizer.step(), zero_grad included")
    elif execution == "default":
        # what a torch user trains with: the plain Python step (torch has no other default path)
        api["execution"] = "default -> eager: the plain Python step (forward, loss, backward, optimizer.step())"
    else:
        api["execution"] = "eager"
    return called_step(whole_step, losses, feed, mark_steps=model_only)


def graph_replay_step(train_step: Callable[[Any, Any], Any], optimizer, losses: dict, feed: Feed) -> Callable[[], None]:
    """A step that captures `train_step` on the feed's first batch in a CUDA graph on its first call (warm-up
    included, like a compile) and replays the graph on every call, after refilling its inputs where the feed
    moves batches from the host."""
    graph_state: dict[str, Any] = {}
    static = feed.next()

    def step():
        if "graph" not in graph_state:  # warm-up and capture inside the first step, like a compile
            graph_state["graph"], graph_state["loss"] = _capture_step(partial(train_step, *static), optimizer, losses)
        if feed.refill is not None:
            feed.refill(*static)
        graph_state["graph"].replay()
        losses["last"] = graph_state["loss"]  # static: each replay overwrites it

    return step


def called_step(whole_step: Callable[[Any, Any], Any], losses: dict, feed: Feed, *,
                mark_steps: bool) -> Callable[[], None]:
    """A step that calls `whole_step` on the feed's next batch; with `mark_steps` (CUDA-graph compile modes)
    each call first announces a new step to torch's CUDA graph trees."""
    # under CUDA graphs (CUDA_GRAPH_COMPILE_MODES) each replay overwrites the last one's outputs: a new
    # step is announced to the graph trees, and the first loss is copied out before it is overwritten
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    mark_step = mark_step if mark_steps else None

    def step():
        if mark_step is not None:
            mark_step()
        loss = whole_step(*feed.next())
        if "first" not in losses:
            losses["first"] = loss.clone()
        losses["last"] = loss

    return step


def _capture_step(train_step: Callable[[], Any], optimizer, losses: dict) -> tuple[Any, Any]:
    """Capture one whole training step (forward, loss, backward, optimizer.step) in a CUDA graph.

    As torch's docs prescribe: warm-up steps on a side stream (cuDNN autotuning, optimizer state,
    the allocator's pools), gradients set to None so the captured backward allocates them from
    the graph's pool, then capture. Returns the graph and its static loss tensor.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_STEPS):
            loss = train_step()
            losses.setdefault("first", loss)
    torch.cuda.current_stream().wait_stream(side)
    optimizer.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = train_step()
    return graph, static_loss
