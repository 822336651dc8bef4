"""A session's compilation caches (`measure.compile_cache`): the folders each run's framework and CUDA driver
compile into, which the session owns and removes at its end."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from harness.seam.backend import Backend
from harness.seam.runspec import RunSpec


class CompileCaches:
    """The session's cache folders (harness-cache-*, or `root`), made at the first run that needs one."""

    def __init__(self, root: str | Path | None = None):
        """`root`: the folder to make them in (under Slurm, one every node sees); by default a new temporary one."""
        self._given = str(root) if root is not None else None
        self.root: str | None = None

    def for_run(self, spec: RunSpec, backend: Backend) -> tuple[dict[str, str], str | None, Path | None]:
        """(environment, state, folder to remove after the run) of a run's compilation caches, in a folder the
        session owns (close() removes it): a new empty one per process (`compile_cache: cold`), or one per
        configuration (`warm`: cold for its first process, warm once a process has filled it). The CUDA
        driver's cache of kernels it compiled from PTX (a build without machine code for the GPU: TensorFlow
        2.21 on compute capability 9.0) is the process's own in either mode: otherwise it is one folder per user
        (~/.nv/ComputeCache), kept across processes and sessions, and a "cold" first step would reuse the
        kernels an earlier process compiled. A capacity probe keeps the framework's and the driver's defaults."""
        if spec.probe:
            return {}, None, None
        if self.root is None:
            self.root = self._given or tempfile.mkdtemp(prefix="harness-cache-")
            Path(self.root).mkdir(parents=True, exist_ok=True)
        own = Path(self.root, f"run-{spec.run_id}")  # this process's, removed after its run
        own.mkdir(exist_ok=True)
        driver = {"CUDA_CACHE_PATH": str(own / "cuda-driver")}
        folder = self.shared(spec) or own
        env = backend.compile_cache_env(str(folder))
        if not env:
            return driver, "none", own
        state = "warm" if folder != own and folder.is_dir() and any(folder.iterdir()) else "cold"
        folder.mkdir(exist_ok=True)
        return {**env, **driver}, state, own

    def shared(self, spec: RunSpec) -> Path | None:
        """The framework's cache folder a configuration's processes share (`compile_cache: warm`), else None."""
        if spec.measure.compile_cache != "warm" or self.root is None:
            return None
        return Path(self.root, f"config-{hashlib.sha256(spec.run_key.encode()).hexdigest()[:16]}")

    def close(self) -> None:
        """Remove every cache folder of the session."""
        root, self.root = self.root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
