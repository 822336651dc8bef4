"""The environment variables harness reads, each declared once here with its type and meaning.

They are read when asked (`variables()`), never at import: a worker reads what the runner set for it just before,
and a test sets them in os.environ before the code under test asks. A variable set but empty counts as unset,
except CUDA_VISIBLE_DEVICES, where empty means no GPU. A value of the wrong type is an InputError naming it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from harness.errors import InputError

#: A switch: on only when set to 1 (any other value is off, as harness has always read them).
Switch = Annotated[bool, BeforeValidator(lambda value: value == "1")]
#: Process ids, comma-separated; anything that is not a number is skipped.
Pids = Annotated[tuple[int, ...], BeforeValidator(
    lambda value: tuple(int(p) for p in str(value).split(",") if p.strip().isdigit()))]


def _var(name: str, description: str, default=None):
    return Field(default, alias=name, description=description)


class Variables(BaseModel):
    """What this process's environment says to harness: one field per variable, its name the alias."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    backends: str = _var("HARNESS_BACKENDS", "Backends added while developing: NAME=module:Class,...", "")
    workloads: str = _var("HARNESS_WORKLOADS", "Workloads added while developing: NAME=module:ATTR,...", "")
    stores: str = _var("HARNESS_STORES", "Store classes added while developing: SCHEME=module:Class,...", "")
    store: str | None = _var("HARNESS_STORE", "The store a command uses without --store (a file or a URL)")
    store_init: Switch = _var("HARNESS_STORE_INIT", "1: create harness's tables in a PostgreSQL database that "
                              "holds other tables", False)
    host_lock: str | None = _var("HARNESS_HOST_LOCK", "The host-wide timing lock's file, instead of the default")
    host_lock_held: Switch = _var("HARNESS_HOST_LOCK_HELD", "Set by the runner in a data-parallel run's replicas: "
                                  "it holds the host lock for them", False)
    progress_file: str | None = _var("HARNESS_PROGRESS_FILE", "Set by the runner: where a worker appends its "
                                     "progress events")
    memory_limit_bytes: int | None = _var("HARNESS_MEMORY_LIMIT_BYTES", "Set by the runner under --memory-limit: "
                                          "the worker's data segment cap")
    pause_pids: Pids = _var("HARNESS_PAUSE_PIDS", "Set by the runner: process groups of workers started ahead, "
                            "stopped while this run is timed", ())
    nnodes: int = _var("HARNESS_NNODES", "--nnodes: the nodes of a data-parallel run", 1)
    node_rank: int = _var("HARNESS_NODE_RANK", "--node-rank: this node's rank", 0)
    rdzv_endpoint: str | None = _var("HARNESS_RDZV_ENDPOINT", "--rdzv-endpoint: node 0's HOST:PORT")
    rdzv_id: str | None = _var("HARNESS_RDZV_ID", "--rdzv-id: the rendezvous id")
    replica: Switch = _var("HARNESS_REPLICA", "Set by the runner: this worker is a data-parallel replica", False)
    world_size: int = _var("WORLD_SIZE", "A replica's world size (the replica contract)", 1)
    rank: int = _var("RANK", "A replica's global rank (the replica contract)", 0)
    local_rank: int = _var("LOCAL_RANK", "A replica's rank on its node (the replica contract)", 0)
    local_world_size: int | None = _var("LOCAL_WORLD_SIZE", "A replica's replicas on its node (default: all)")
    slurm_job_id: str | None = _var("SLURM_JOB_ID", "Set by Slurm: the job's id")
    slurm_array_job_id: str | None = _var("SLURM_ARRAY_JOB_ID", "Set by Slurm: an array task's job id")
    slurm_array_task_id: str | None = _var("SLURM_ARRAY_TASK_ID", "Set by Slurm: an array task's index")
    slurm_job_partition: str | None = _var("SLURM_JOB_PARTITION", "Set by Slurm: the job's partition")
    slurm_job_gpus: str | None = _var("SLURM_JOB_GPUS", "Set by Slurm: the GPUs the job was given")
    cuda_visible_devices: str | None = _var("CUDA_VISIBLE_DEVICES", "The GPUs a process may see (empty: none)")
    cuda_launch_blocking: Switch = _var("CUDA_LAUNCH_BLOCKING", "1 serializes CUDA launches (warned about)", False)


#: The variables whose empty value says something (every other one set empty counts as unset).
_EMPTY_MEANS_SOMETHING = frozenset({"CUDA_VISIBLE_DEVICES"})
_NAMES = frozenset(field.alias for field in Variables.model_fields.values())


def variables(env: Mapping[str, str] | None = None) -> Variables:
    """The variables of `env` (this process's environment by default), read now; InputError for a malformed one."""
    env = os.environ if env is None else env
    given = {name: value for name, value in env.items()
             if name in _NAMES and (value or name in _EMPTY_MEANS_SOMETHING)}
    try:
        return Variables.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0])
        raise InputError(f"{name}={given[name]!r}: {first['msg']}", field=name) from None
