"""What a workload is, independent of any framework."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict

Execution = Literal["eager", "graph", "compiled"]


class Params(BaseModel):
    """Base of every workload's parameter model: unknown fields are errors, values are checked."""

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
