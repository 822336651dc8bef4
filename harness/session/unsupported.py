"""Runs answered without a worker: a backend not registered or not installed, a combination it cannot run, a GPU
that is not there, replicas that the nodes cannot share. Each is an `unsupported` record with its reason, and
`answer_holds` tells `--resume` which of those answers hold wherever the session goes on."""

from __future__ import annotations

from harness.machine.presence import MISSING_DEVICE, missing_device_reason
from harness.results.record import Result
from harness.seam import distributed as dp
from harness.seam.backend import Backend
from harness.seam.runspec import RunSpec
from harness.session.dataparallel import replicas_of
from harness.session.worker_process import runner_env

#: How an `unsupported` record says that the Python it ran in lacked the backend, not that the backend cannot
#: take the configuration (see answer_holds).
NOT_REGISTERED = "no backend named"
NOT_INSTALLED = "is not installed in this Python"


def answer_holds(error: str) -> bool:
    """Whether an `unsupported` record's reason is the backend's answer about its configuration, which holds
    wherever the session goes on, and not this machine's or this Python's lack (no such backend registered,
    its framework not installed, the GPU not there): `--resume` takes the first kind as given and runs the
    second kind again (the framework may be installed since, the GPU there)."""
    return not any(marker in error for marker in (NOT_REGISTERED, NOT_INSTALLED, MISSING_DEVICE))


def static_status(spec: RunSpec, backends: dict[str, Backend], cluster: dp.Cluster, *,
                  here: bool = True) -> tuple[str, str] | None:
    """(status, reason) for a run decided without a worker: backend missing or combination unmapped; where its
    worker runs `here` (not on a cluster's node, whose GPUs a submitter on a login node lacks), a GPU not there."""
    backend = backends.get(spec.backend)
    if backend is None:
        return "unsupported", f"{NOT_REGISTERED} {spec.backend!r} is registered"
    if not backend.installed():
        hint = f" ({backend.install_hint})" if backend.install_hint else ""
        return "unsupported", f"{spec.backend} {NOT_INSTALLED}{hint}"
    reason = (backend.unsupported_reason(spec.workload, spec.params, spec.device, spec.options)
              or (missing_device_reason(spec.device) if here else None))  # a GPU not there: no worker to start
    if reason:
        return "unsupported", reason
    replicas = replicas_of(spec)
    if replicas > 1 and replicas % cluster.nnodes:
        return "unsupported", (f"replicas={replicas} cannot be shared out evenly over --nnodes {cluster.nnodes}: "
                               "every node runs replicas / nnodes of them")
    if replicas == 1 and cluster.multi_node:
        return "unsupported", f"replicas=1 runs on one node; --nnodes {cluster.nnodes} is for replicas > 1"
    return None


def decided(result: Result, backend: Backend | None, status: tuple[str, str], duration_s: float) -> Result:
    """The record of a run decided without a measurement: its status and reason, the runner's environment."""
    return result.updated(status=status[0], error=status[1], duration_s=duration_s,
                          framework_version=backend.framework_version() if backend else None, env=runner_env())
