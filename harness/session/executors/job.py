"""What runs inside a Slurm job: one harness worker, on the GPUs Slurm gave the job.

Imported by the job's Python (through submitit's pickle of `run_worker`), so it imports nothing but the
standard library. It writes two small JSON files beside the run's spec: `placement.json` when the job
starts (job id, node, GPUs, time) and `exit.json` when the worker has ended (its exit code); the worker
itself writes `result.json`, as it does on the submitter's machine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path

#: Variables the job must take from Slurm, never from the submitter: which GPUs the job owns.
JOB_OWNED = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def _write(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(tmp, path)


def job_id() -> str | None:
    """This job's id as squeue shows it: ARRAY_TASK for an array task, else the job id."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


@dataclass(frozen=True)
class Placement:
    """Where a job ran (its placement.json): job id, node, the GPUs Slurm gave it (as the job saw them), partition,
    start, and whether it found its configuration's shared compile cache filled; None where unknown."""

    job_id: str | None = None
    node: str | None = None
    partition: str | None = None
    gpus: str | None = None
    started_at: str | None = None
    compile_cache_found: bool | None = None  # whether the configuration's shared cache held files at the job's start

    @classmethod
    def of(cls, doc) -> "Placement":
        """The placement a job wrote (its JSON object); an empty one for anything else."""
        given = doc if isinstance(doc, dict) else {}
        return cls(**{f.name: given[f.name] for f in fields(cls) if f.name in given})


def placement() -> Placement:
    """Where this job runs: job id, node, the GPUs Slurm gave it (as the job sees them), partition, start."""
    return Placement(job_id=job_id(), node=socket.gethostname(), partition=os.environ.get("SLURM_JOB_PARTITION"),
                     gpus=os.environ.get("SLURM_JOB_GPUS") or os.environ.get("CUDA_VISIBLE_DEVICES"),
                     started_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", ""))


def run_worker(argv: list[str], env: dict[str, str], folder: str, shared_cache: str | None = None) -> int:
    """Run one worker (argv) with the submitter's settings (env) over the job's own environment; its output goes
    to FOLDER/worker.log. Returns the worker's exit code (also written to FOLDER/exit.json). `shared_cache`: the
    compilation cache the run's configuration shares (`compile_cache: warm`); whether an earlier job filled it
    is noted in placement.json."""
    # submitit warns a job of its time limit with SIGUSR2 to checkpoint it; a run has no checkpoint, so it
    # goes on until Slurm ends it, and the job's state says TIMEOUT
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    run = Path(folder)
    where = placement()
    if shared_cache:
        cache = Path(shared_cache)
        where = replace(where, compile_cache_found=cache.is_dir() and any(cache.iterdir()))
    _write(run / "placement.json", asdict(where))
    child_env = {**os.environ, **{k: v for k, v in env.items() if k not in JOB_OWNED}}
    with open(run / "worker.log", "ab") as log:
        code = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=child_env)
    _write(run / "exit.json", {"returncode": code})
    return code
