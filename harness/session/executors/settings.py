"""The Slurm options of `--executor slurm`: from flags, over a scenario-independent config file (YAML).

The file holds the cluster's facts a user rarely changes (partition, account, gres), so that a scenario
stays the same on every cluster:

    partition: gpu-a6000
    account: vision
    time: "30"              # minutes, or [D-]HH:MM:SS / MM:SS as sbatch takes it
    gpus_per_job: 1         # whole GPUs each job gets (gres gpu:N); by default what the run's device needs
    gres: "gpu:a6000:1"     # instead of gpus_per_job, a full gres
    constraint: a6000
    sbatch: {qos: high}     # any other sbatch option; an empty value is a flag (no-requeue: "")
    folder: harness-slurm   # where the jobs' files go: a folder every node sees
    poll_s: 2
    parallel: 256           # jobs of one array running at once
    array_size: 1000        # tasks of one array at most (the cluster's MaxArraySize)
    lost_after_s: 900       # a job nothing tells the state of (squeue, sacct, its own files) this long is lost
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import InputError

_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")


class SlurmSettings(BaseModel):
    """Where and how the jobs of a session are submitted."""

    model_config = ConfigDict(extra="forbid")

    partition: str | None = None
    account: str | None = None
    time: str | None = Field(default=None, description="the job's time limit; by default the run's timeout")
    gpus_per_job: int | None = Field(default=None, ge=0, le=64)
    gres: str | None = None
    constraint: str | None = None
    sbatch: dict[str, str] = Field(default_factory=dict)
    folder: str = "harness-slurm"
    poll_s: float = Field(default=2.0, gt=0, le=600)
    #: jobs of one array that run at once (sbatch --array=...%N)
    parallel: int = Field(default=256, ge=1)
    #: tasks of one array at most: below the cluster's MaxArraySize (1001 unless its slurm.conf says more)
    array_size: int = Field(default=1000, ge=1)
    #: seconds a job may go untold of (squeue not answering or not listing it, no accounting, no exit file of its
    #: own) before its run is recorded lost, with why
    lost_after_s: float = Field(default=900.0, gt=0)

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, value):
        if value is None:
            return None
        text = str(value).strip()
        if not _TIME.match(text):
            raise ValueError(f"{value!r} is not a Slurm time: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS")
        return text

    @field_validator("sbatch", mode="before")
    @classmethod
    def _sbatch(cls, value):
        if isinstance(value, dict):
            return {str(k).lstrip("-"): str(v) for k, v in value.items()}
        return value


def _read_file(path: str) -> dict:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})", source=path, field="--slurm-config") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML ({exc})", source=path, field="--slurm-config") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of Slurm options", source=path, field="--slurm-config")
    return data


def slurm_settings(config_file: str | None, flags: dict) -> SlurmSettings:
    """The settings: the config file's, then each flag given (None: not given). InputError naming the file (or
    flag) and the field where a value is wrong."""
    data = _read_file(config_file) if config_file else {}
    given = {k: v for k, v in flags.items() if v not in (None, (), {})}
    if "sbatch" in given:
        given["sbatch"] = {**(data.get("sbatch") or {}), **given["sbatch"]}
    try:
        return SlurmSettings.model_validate({**data, **given})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "?"
        source = config_file if where in data and where not in given else f"--slurm-{where.replace('_', '-')}"
        raise InputError(f"{source}: {where}: {error['msg']}", source=source, field=where) from None


def sbatch_pairs(values: tuple[str, ...]) -> dict[str, str]:
    """--slurm-arg KEY=VALUE values as a mapping (InputError for one without "="); KEY= is a flag."""
    out = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key.strip("- "):
            raise InputError(f"--slurm-arg {value!r}: expected KEY=VALUE (an sbatch option, e.g. qos=high; KEY= for a "
                             "flag such as no-requeue=)",
                             field="--slurm-arg")
        out[key.strip().lstrip("-")] = rest
    return out


def array_parameters(s: SlurmSettings, specs: list, gpus: int) -> dict:
    """submitit's parameters of one array of runs (`specs`, RunSpecs): the settings, the GPUs each job needs, a
    time limit from the runs' timeouts."""
    longest = max(float(spec.timeout_s) for spec in specs)
    minutes = max(1, math.ceil((longest + 120) / 60))  # the run's timeout, and its worker's start and exit
    extra = {"time": s.time or str(minutes), **({"account": s.account} if s.account else {})}
    gres = s.gres or (f"gpu:{s.gpus_per_job if s.gpus_per_job is not None else gpus}"
                      if (s.gpus_per_job or gpus) else None)
    params = {"time": minutes, "use_srun": False, "stderr_to_stdout": True, "array_parallelism": s.parallel,
              "job_name": f"harness-{specs[0].session_id[:8]}",
              "additional_parameters": {**extra, **{k: v or True for k, v in s.sbatch.items()}}}
    for key, value in (("partition", s.partition), ("gres", gres), ("constraint", s.constraint)):
        if value:
            params[key] = value
    return params
