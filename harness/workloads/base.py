"""What a workload is, independent of any framework."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from pydantic import ConfigDict

from harness.fields import NumbersNotBooleans

#: The execution modes (docs/execution.md defines each; every mode covers the whole step). `default` is
#: neutral: what the framework's users get when they train the obvious way, resolved by each backend that
#: declares it (torch eager, Keras `model.fit` at Keras's own defaults, the JAX plugin's jitted step) and
#: recorded in `api.execution`.
Execution = Literal["eager", "graph", "cuda_graph", "compiled", "default"]

#: The execution mode a backend must declare on its own (technique_values leaves it out unless asked).
DEFAULT_EXECUTION = "default"


class Params(NumbersNotBooleans):
    """Base of every workload's parameter model: unknown fields are errors, values are checked,
    booleans are not numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


@dataclass(frozen=True)
class Workload:
    """A neutral workload: its parameter model, headline metric and work count."""

    name: str
    description: str
    params_model: type[Params]
    metric: str
    unit: str
    #: FLOPs of one timed step, from the validated params (None where not defined).
    flops_per_step: Callable[[Any], float | None]
    #: Items one step processes, for a rate (images per step; 1 product for gemm).
    items_per_step: Callable[[Any], float]
    #: The precision whose datasheet peak the achieved TFLOP/s is compared with.
    peak_precision: Callable[[Any], str]
    #: The status a run's `checks` call for, with the reason ((None, None) when they pass).
    verdict: Callable[[dict, Any], tuple[str | None, str | None]] = lambda checks, params: (None, None)
    #: Each technique's baseline value: the denominator of a technique speedup in compare and report.
    technique_baselines: dict[str, Any] = field(default_factory=dict)
    #: The parameter a report draws on its x axis (None: no sweep plot for this workload).
    x_param: str | None = None
    #: The report's plots of this workload (harness.present.report draws each kind).
    plots: tuple[str, ...] = ()
    #: The parameter that counts data-parallel replicas (None: the workload runs in one process).
    #: Its work per step is global (every replica's); compare and report compute scaling efficiency
    #: against the same configuration at 1 replica (docs/distributed.md).
    replicas_param: str | None = None
    #: Parameters added after records existed, at the value older records implicitly ran with: left
    #: out of the run key at that value, and read as that value where a record lacks them, so a
    #: store's older records keep their keys and still match new ones.
    quiet_defaults: dict[str, Any] = field(default_factory=dict)
    #: Elements of the step's largest single tensor per batch item, from the validated params (None: not
    #: known). A capacity search notes the batch at which it passes 2**31, where kernels that index with
    #: 32-bit integers fail whatever the memory (TensorFlow's BatchNorm on an H200).
    largest_tensor_per_item: Callable[[Any], int | None] = lambda params: None
    #: The fewest training steps that must run before the first timed block for the step to be in its steady
    #: state, from the validated params (an input pipeline's buffers allocated and reused once): the worker
    #: warms up for at least this many, whatever `measure.warmup` says, and the record says so.
    warmup_floor: Callable[[Any], int] = lambda params: 0
    #: A training workload's neutral half (a harness.workloads.training.Training: inputs, optimizer, loss), which
    #: every backend's trainer runs with a model part; None for a workload each backend implements whole (gemm).
    training: Any = None
    #: Where this workload's package keeps its model part for each framework (backend name -> "module:ATTR", a
    #: harness.workloads.training.ModelPart); a backend may also carry parts for workloads it knows
    #: (Backend.parts). Imported only in a worker.
    parts: dict[str, str] = field(default_factory=dict)

    def replicas(self, params) -> int:
        """How many data-parallel replicas these params ask for (1 for a workload without them)."""
        if self.replicas_param is None:
            return 1
        value = params.get(self.replicas_param, 1) if isinstance(params, dict) else getattr(params, self.replicas_param, 1)
        return int(value or 1)

    def headline_per_step(self, params) -> float:
        """Work of one step in the headline's unit-seconds: images for images/s, TFLOP for TFLOP/s."""
        if self.metric == "tflops":
            return float(self.flops_per_step(params) or 0.0) / 1e12
        return float(self.items_per_step(params))

    def validate(self, params: dict) -> Params:
        """Validated params (pydantic ValidationError on bad input)."""
        return self.params_model.model_validate(params)


def fingerprint(*arrays) -> str:
    """A short hash of arrays' shapes, dtypes and bytes: equal on two backends means equal inputs."""
    import hashlib

    import numpy as np

    digest = hashlib.blake2b(digest_size=12)
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.shape}{array.dtype}".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()
