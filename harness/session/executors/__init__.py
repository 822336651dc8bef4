"""Where a session's runs execute: its executor.

- `local` (the default): each run in a worker process on this machine, started and waited for by the
  Runner itself (harness.session.runner), as harness always has.
- `slurm`: each run as a Slurm job, the whole plan submitted as job arrays (`slurm.SlurmExecutor`), with
  the options of `settings.SlurmSettings` (flags over a config file); `job` is what runs in the job,
  `queue` asks Slurm how its jobs stand, and `endings` makes the record of a job that has ended.

An executor other than the local one takes the whole plan (`run_plan(runner, plan) -> SessionOutcome`) and
uses the Runner's parts: its store, its observers, its decisions of runs that need no worker. How the ranks
of a data-parallel run start (torchrun, TensorFlow's workers) stays the backend's launcher, not an executor.
"""

from __future__ import annotations

from typing import Callable

from harness.session.executors.settings import (
    SlurmSettings,
    sbatch_pairs,
    slurm_settings,
)
from harness.session.executors.slurm import SlurmExecutor

#: The executors `harness run --executor` takes.
EXECUTORS = ("local", "slurm")


def executor_for(name: str, settings: SlurmSettings | None, notice: Callable[[str], None] | None = None):
    """The executor of a session: None for local worker processes (the Runner runs them), else one that runs
    the whole plan."""
    if name == "slurm":
        return SlurmExecutor(settings or SlurmSettings(), notice)
    return None


__all__ = ["EXECUTORS", "SlurmExecutor", "SlurmSettings", "executor_for", "sbatch_pairs", "slurm_settings"]
