"""Framework-neutral workloads: their parameters, headline metric, FLOP count and seeded inputs, written once.

A workload is a plugin like a backend (harness.workloads.registry): the bundled GEMM and ResNet-50 and any
package's `harness.workloads` entry point register alike. A training workload's model is built per framework by
its part (harness.workloads.training.ModelPart); each backend's trainer runs it.
"""

from __future__ import annotations

import typing

from harness.workloads.base import DEFAULT_EXECUTION, Workload
from harness.workloads.registry import BROKEN, WORKLOADS, get_workload


def technique_values(name: str, *, default_execution: bool = False) -> dict[str, tuple]:
    """Every value of each technique of a workload, as its parameter model allows them: what a backend
    that maps them all declares (`Backend.workloads`). `execution: default` is in only with
    `default_execution`: it means "what this framework's users run", which each backend resolves itself, so
    a backend (or plugin) that says nothing about it answers `unsupported` instead of guessing."""
    workload = WORKLOADS[name]
    fields = workload.params_model.model_fields
    values = {key: typing.get_args(fields[key].annotation) for key in workload.technique_baselines}
    if "execution" in values and not default_execution:
        values["execution"] = tuple(v for v in values["execution"] if v != DEFAULT_EXECUTION)
    return values


__all__ = ["BROKEN", "WORKLOADS", "Workload", "get_workload", "technique_values"]
