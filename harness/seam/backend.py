"""What a backend plugin is, and the one registry of backends and their names.

A backend is found through the `harness.backends` entry-point group (the bundled ones also from a
source checkout, and `HARNESS_BACKENDS=name=module:Class` while one is being developed). Every
other place that needs a backend or one of its names asks this module: the CLI, scenario
validation, the runner, compare and report.

A backend class must be importable without importing its framework. Its framework is imported in
`open_device` and `prepare`, which only ever run in a worker process; the core owns the rest of a
run (device identity, the timed loop, rates and FLOP/s, status, the record: harness.worker.execute).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.errors import InputError, Unsupported, did_you_mean
from harness.machine.variables import variables
from harness.seam.adapter import Device, Prepared, RunContext, RunInputs  # noqa: F401 - RunContext: the core and backends import it from here
from harness.seam.distributed import Cluster, Launch, Replica
from harness.seam.runspec import RunSpec
from harness.workloads import WORKLOADS, technique_values
from harness.workloads.base import DEFAULT_EXECUTION, Params
from harness.workloads.host_inputs import host_inputs_unsupported_reason

ENTRY_POINT_GROUP = "harness.backends"

#: Refusals more than one framework gives in the same words (Backend.unsupported_reason asks for them by flag).
TF32_ON_CPU = "TF32 is a tensor-core format of NVIDIA Ampere and newer GPUs; the CPU has none"
CUDA_GRAPH_ON_CPU = "a CUDA graph needs a CUDA GPU; the CPU has none"


class NoOptions(BaseModel):
    """A backend without options of its own: any option is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Backend:
    """A framework adapter: declarations (class attributes) and four verbs run in the worker.

    Subclasses declare `name`, `aliases`, `distributions`, `workloads`, `modules` and optionally
    `options_model` and `install_hint`, and implement `open_device`. A workload module named in
    `modules` has `prepare(params, device, run) -> harness.seam.adapter.Prepared`.
    """

    #: Canonical name, as written in result records (`torch`, `tensorflow`).
    name: ClassVar[str]
    #: Other names a user may type (`pytorch`; `tf`).
    aliases: ClassVar[tuple[str, ...]] = ()
    #: Distributions whose installed version is the framework's version (first found wins).
    distributions: ClassVar[tuple[str, ...]] = ()
    #: How to install the framework, said when it is missing.
    install_hint: ClassVar[str] = ""
    #: Workloads this backend runs, each with the neutral technique values it maps.
    workloads: ClassVar[dict[str, dict[str, tuple[Any, ...]]]] = {}
    #: The module holding each workload's `prepare`, for workloads this backend implements whole (gemm);
    #: imported only inside the worker.
    modules: ClassVar[dict[str, str]] = {}
    #: The module of this backend's trainer, whose `prepare(workload, part, params, device, run)` runs any
    #: training workload (Workload.training) with the workload's model part for this backend; None: none.
    trainer: ClassVar[str | None] = None
    #: Model parts this backend carries for training workloads it knows (workload -> "module:ATTR"); a workload's
    #: own package brings its parts in Workload.parts instead. Imported only inside the worker.
    parts: ClassVar[dict[str, str]] = {}
    #: Whether the trainer resolves `execution: default` (what this framework's users train with).
    trains_by_default: ClassVar[bool] = False
    #: Execution modes this framework has no equivalent of, each with the reason: `unsupported` for every workload.
    missing_modes: ClassVar[dict[str, str]] = {}
    #: (parameter, value) pairs this framework cannot run on the CPU, each with the reason (TF32_ON_CPU,
    #: CUDA_GRAPH_ON_CPU): `unsupported` for every workload on the CPU.
    refused_on_cpu: ClassVar[dict[tuple[str, Any], str]] = {}
    #: The backend's own scenario options (`options: {<backend>: {...}}`), validated like every field.
    options_model: ClassVar[type[BaseModel]] = NoOptions
    #: Modules a worker may import before it knows its run (a capacity probe's worker, started while the
    #: previous probe runs): the framework's own imports, which must neither touch a device nor take its memory.
    preload_modules: ClassVar[tuple[str, ...]] = ()
    #: Whether it trains data-parallel (a workload's `replicas` > 1): it implements `launch` and
    #: `open_replica` (docs/distributed.md). A backend that does not gets `unsupported` for replicas > 1.
    data_parallel: ClassVar[bool] = False
    #: The most elements one tensor may hold in its GPU kernels, where that is less than the memory allows
    #: (None: no such bound known). A capacity search aims its memory model's guess no further (harness.session.capacity).
    gpu_max_tensor_elements: ClassVar[int | None] = None

    # --- declarations, answered without importing the framework ----------------------------------

    def framework_version(self) -> str | None:
        """The installed framework's version, read from package metadata (no import)."""
        for dist in self.distributions:
            try:
                return md.version(dist)
            except md.PackageNotFoundError:
                continue
        return None

    def installed(self) -> bool:
        """Whether the framework is installed in this Python."""
        return self.framework_version() is not None

    #: Options added after records were stored: left out of the validated options at their default.
    keyed_off_default: ClassVar[tuple[str, ...]] = ()

    def validate_options(self, options: dict) -> dict:
        """The options with defaults filled; ValueError naming the bad option and what was expected."""
        try:
            validated = self.options_model.model_validate(options or {}).model_dump()
            fields = self.options_model.model_fields
            # options added after records were stored: kept only off their default, so older run_keys still match
            return {k: v for k, v in validated.items() if not (k in self.keyed_off_default and v == fields[k].default)}
        except ValidationError as exc:
            parts = []
            for error in exc.errors()[:4]:
                # loc, type, msg and input: the keys pydantic gives every error (ErrorDetails declares them required)
                loc = ".".join(str(p) for p in error["loc"])
                msg = "unknown option" if error["type"] == "extra_forbidden" else error["msg"]
                allowed = ", ".join(sorted(self.options_model.model_fields))
                parts.append(f"{loc}: {msg} (got {error['input']!r}; {self.name} options: {allowed or 'none'})")
            raise ValueError("; ".join(parts)) from None

    def part_target(self, workload: str) -> str | None:
        """Where this backend's model part of a training workload is ("module:ATTR"): the workload's own package
        first, else this backend's `parts`; None where there is none (or no trainer to run it)."""
        known = WORKLOADS.get(workload)
        if self.trainer is None or known is None or known.training is None:
            return None
        return known.parts.get(self.name) or self.parts.get(workload)

    def techniques(self, workload: str) -> dict[str, tuple[Any, ...]] | None:
        """The technique values this backend maps for a workload; None where it cannot run the workload at all."""
        if workload in self.workloads:
            return self.workloads[workload]
        if self.part_target(workload) is None:
            return None
        return technique_values(workload, default_execution=self.trains_by_default)

    def workload_names(self) -> list[str]:
        """Every registered workload this backend can run (its own and those with a model part for it)."""
        return sorted(name for name in WORKLOADS if self.techniques(name) is not None)

    def unsupported_reason(self, workload: str, params: dict, device: str, options: dict | None = None) -> str | None:
        """Why this backend cannot run this combination, decided without importing the framework; else None.

        The core asks twice: before a worker starts (device as asked, maybe `auto`) and inside the
        worker once the device is resolved, so a backend states each impossibility here only.
        """
        techniques = self.techniques(workload)
        if techniques is None:
            return (f"{self.name} backend has no workload {workload!r}: no model part of it for {self.name} (it has: "
                    f"{', '.join(self.workload_names())})")
        for key, allowed in techniques.items():
            if key in params and params[key] not in allowed:
                if key == "execution" and params[key] == DEFAULT_EXECUTION:
                    return (f"the {self.name} backend does not declare execution: default for {workload} (what its "
                            "framework's users run is each backend's own to resolve; docs/execution.md)")
                return f"{self.name} backend does not map {key}={params[key]!r} for {workload}"
        execution = params.get("execution")
        if execution in self.missing_modes:
            return self.missing_modes[execution]
        if device == "cpu":
            refused = [why for (key, value), why in self.refused_on_cpu.items() if params.get(key) == value]
            if refused:
                return refused[0]
        return (host_inputs_unsupported_reason(workload, params)
                or self.replicas_unsupported_reason(workload, params, device, options))

    def replicas_unsupported_reason(self, workload: str, params: dict, device: str, options: dict | None = None) -> str | None:
        """Why this backend cannot run these params data-parallel (replicas > 1), or None."""

        known = WORKLOADS.get(workload)
        replicas = known.replicas(params) if known is not None else 1
        if replicas > 1 and not self.data_parallel:
            return (f"the {self.name} backend does not implement data-parallel training (replicas={replicas}); "
                    "it runs replicas: 1 only")
        return None

    def worker_env(self, options: dict, probe: bool = False) -> dict[str, str]:
        """Environment variables the framework must read at import, for a worker running these options
        (`probe`: a capacity probe, which skips autotuning sweeps)."""
        return {}

    def compile_cache_env(self, directory: str) -> dict[str, str]:
        """Environment variables that point the framework's compilation caches (compiled code, autotuning
        choices) at `directory`, for a worker the runner gives one: a directory of its own and empty (a cold
        process: nothing from earlier processes or sessions), or one shared by a configuration's processes within
        a session (`measure.compile_cache: warm`). {} where the framework keeps no cache across processes
        that harness can point, or none that works (the record then says `compile_cache: none`)."""
        return {}

    def launch(self, spec: RunSpec, worker: list[str], cluster: Cluster) -> Launch:
        """The processes that start this node's replicas of a data-parallel run (parent side, no framework import).

        `worker` is the command of one replica (`python -m harness.worker SPEC RESULT`); each replica's
        environment must follow the replica contract of harness.seam.distributed. Raise
        harness.errors.Unsupported for a layout this backend cannot start.
        """

        raise Unsupported(f"the {self.name} backend does not implement data-parallel training")

    # --- verbs run in the worker --------------------------------------------------------------------

    def preload(self) -> None:
        """Import `preload_modules` (a worker started ahead of its run; harness.worker --ahead)."""
        for module in self.preload_modules:
            importlib.import_module(module)

    def open_replica(self, device: str, cpu_threads: dict, replica: Replica) -> Device:
        """`open_device` for one replica of a data-parallel run: also join the replicas' process group
        (torch.distributed, tf.distribute). `device` is this replica's own (harness.seam.distributed.replica_device)."""

        raise Unsupported(f"the {self.name} backend does not implement data-parallel training")

    def open_device(self, device: str, cpu_threads: dict) -> Device:
        """Import the framework, set its CPU thread pools (`intra_op`, `inter_op`; None: its default),
        resolve a neutral device (`auto`, `cpu`, `cuda:N`) and return its handle."""
        raise NotImplementedError(f"the {self.name} backend does not implement open_device")

    def prepare(self, workload: str, params: Params, device: Device, run: RunInputs) -> Prepared:
        """Build the workload's step on the device (model, data, optimizer) and say which APIs it used: the
        backend's own module for a workload it implements whole, else its trainer with the workload's model part."""

        if workload in self.modules:
            return importlib.import_module(self.modules[workload]).prepare(params, device, run)
        target = self.part_target(workload)
        if target is None:
            raise Unsupported(f"the {self.name} backend has no workload {workload!r} (it has: "
                              f"{', '.join(self.workload_names())})")
        trainer = importlib.import_module(str(self.trainer))
        return trainer.prepare(WORKLOADS[workload], _load(target), params, device, run)

    def out_of_memory(self, exc: BaseException) -> str | None:
        """Why this exception means the device or host ran out of memory (the evidence), or None."""
        return None


#: The bundled backends, also found when the package's entry points are not installed (a source checkout).
BUILTIN_BACKENDS = {"torch": "backends.torch:TorchBackend", "tensorflow": "backends.tensorflow:TensorFlowBackend"}


def _load(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


#: Backends that failed to load, by name, with the error (shown by `harness list`).
BROKEN: dict[str, str] = {}
_CACHE: dict[str, dict[str, Backend]] = {}


def available_backends() -> dict[str, Backend]:
    """Every registered backend, by canonical name, instantiated (cheap: no framework import).

    Sources, later ones winning: the bundled backends, the `harness.backends` entry points, and
    HARNESS_BACKENDS="name=module:Class,..." (a plugin under development, or a test's fake). A
    backend that fails to load is left out and its error kept in BROKEN, so one broken plugin
    cannot take the others down. Read once per value of HARNESS_BACKENDS.
    """
    extra = variables().backends
    if extra in _CACHE:
        return _CACHE[extra]
    targets: dict[str, str] = dict(BUILTIN_BACKENDS)
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        targets[ep.name] = ep.value
    for item in filter(None, extra.split(",")):
        name, _, target = item.partition("=")
        targets[name.strip()] = target.strip()
    found: dict[str, Backend] = {}
    for name, target in targets.items():
        try:
            backend = _load(target)()
        except Exception as exc:
            BROKEN[name] = f"{type(exc).__name__}: {exc}"
            continue
        found[backend.name] = backend
    _CACHE[extra] = found
    return found


def backend_names() -> dict[str, str]:
    """Every accepted spelling of every backend (canonical names and aliases, lower case) -> canonical name."""
    names: dict[str, str] = {}
    for canonical, backend in available_backends().items():
        names[canonical.lower()] = canonical
        for alias in backend.aliases:
            names[alias.lower()] = canonical
    return names


def resolve_backend_name(name: str, field: str = "backends") -> str:
    """The canonical name of a backend or one of its aliases; InputError naming the choices if none matches."""
    key = str(name).strip().lower()
    names = backend_names()
    if key in names:
        return names[key]
    known = ["/".join((c, *b.aliases)) for c, b in sorted(available_backends().items())]
    broken = f" (failed to load: {', '.join(sorted(BROKEN))})" if BROKEN else ""
    raise InputError(f"unknown backend {name!r}: expected one of {', '.join(known)}{broken}{did_you_mean(key, names)}",
                     field=field)

