"""Framework-neutral workloads: their parameters, headline metric, FLOP count and input data.

Each backend implements the same workload names; what is written here is written once for all.
"""

from __future__ import annotations

from harness.workloads.base import DEFAULT_EXECUTION, Workload
from harness.workloads.gemm import GEMM
from harness.workloads.resnet50_train import RESNET50_TRAIN

WORKLOADS: dict[str, Workload] = {w.name: w for w in (GEMM, RESNET50_TRAIN)}


def get_workload(name: str) -> Workload:
    """The workload registered under `name`; KeyError if none."""
    return WORKLOADS[name]


def technique_values(name: str, *, default_execution: bool = False) -> dict[str, tuple]:
    """Every value of each technique of a workload, as its parameter model allows them: what a backend
    that maps them all declares (`Backend.workloads`). `execution: default` is in only with
    `default_execution`: it means "what this framework's users run", which each backend resolves itself, so
    a backend (or plugin) that says nothing about it answers `unsupported` instead of guessing."""
    import typing

    workload = WORKLOADS[name]
    fields = workload.params_model.model_fields
    values = {key: typing.get_args(fields[key].annotation) for key in workload.technique_baselines}
    if "execution" in values and not default_execution:
        values["execution"] = tuple(v for v in values["execution"] if v != DEFAULT_EXECUTION)
    return values


__all__ = ["WORKLOADS", "Workload", "get_workload", "technique_values"]
