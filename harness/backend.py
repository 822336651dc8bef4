"""What a backend plugin is, and how harness finds one (entry-point group `harness.backends`).

A backend class must be importable without importing its framework: the framework is imported
inside `execute`, which only ever runs in a worker process.
"""

from __future__ import annotations

import importlib
import os
import importlib.metadata as md
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.errors import InputError

ENTRY_POINT_GROUP = "harness.backends"


@dataclass
class RunContext:
    """What the worker hands a backend besides the spec."""

    #: Filled by the backend: warnings that belong in the record (shown in every table).
    warnings: list[str] = field(default_factory=list)
    #: The telemetry sampler handed out by telemetry_for (the worker reads it afterwards).
    telemetry: Any = None

    def telemetry_for(self, device: str):
        """An NVML sampler for a neutral device (`cuda:N`), or a no-op one for the CPU / without NVML.

        Pass it to run_timed as `telemetry`; it samples only during the timed blocks.
        """
        from harness.telemetry import sampler_for

        self.telemetry = sampler_for(device)
        return self.telemetry


class Backend:
    """A framework adapter. Subclasses set the class attributes and implement `execute`."""

    #: Canonical name, as written in result records (`torch`, `tensorflow`).
    name: ClassVar[str]
    #: Other names a user may type (`pytorch`; `tf`).
    aliases: ClassVar[tuple[str, ...]] = ()
    #: Distributions whose installed version is the framework's version (first found wins).
    distributions: ClassVar[tuple[str, ...]] = ()
    #: Workloads this backend runs, each with the neutral technique values it maps.
    workloads: ClassVar[dict[str, dict[str, tuple[Any, ...]]]] = {}
    #: The module that runs each workload (its `run(spec, ctx)`); imported only inside the worker.
    modules: ClassVar[dict[str, str]] = {}

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

    def unsupported_reason(self, workload: str, params: dict, device: str) -> str | None:
        """Why this backend cannot run this combination, decided without importing the framework; else None."""
        if workload not in self.workloads:
            return f"{self.name} backend has no workload {workload!r} (it has: {', '.join(sorted(self.workloads))})"
        for key, allowed in self.workloads[workload].items():
            if key in params and params[key] not in allowed:
                return f"{self.name} backend does not map {key}={params[key]!r} for {workload}"
        return None

    def execute(self, spec: dict, ctx: RunContext) -> dict:
        """Run one spec in this (worker) process and return the measured fields of its record.

        Imports the workload's module from `modules` and calls its `run(spec, ctx)`. Raise
        harness.errors.Unsupported / OutOfMemory for those statuses; `classify_error` maps the
        framework's own exceptions.
        """
        from harness.errors import Unsupported

        workload = spec["workload"]
        if workload not in self.modules:
            raise Unsupported(f"the {self.name} backend has no workload {workload!r} (it has: {', '.join(sorted(self.modules))})")
        return importlib.import_module(self.modules[workload]).run(spec, ctx)

    def classify_error(self, exc: BaseException) -> str | None:
        """The status (`oom`, `unsupported`) a framework exception means, or None for `failed`."""
        return None


#: The bundled backends, also found when the package's entry points are not installed (a source checkout).
BUILTIN_BACKENDS = {"torch": "backends.torch:TorchBackend", "tensorflow": "backends.tensorflow:TensorFlowBackend"}


def _load(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


#: Backends that failed to load, by name, with the error (shown by `harness list`).
BROKEN: dict[str, str] = {}


def available_backends() -> dict[str, Backend]:
    """Every registered backend, by canonical name, instantiated (cheap: no framework import).

    Sources, later ones winning: the bundled backends, the `harness.backends` entry points, and
    HARNESS_BACKENDS="name=module:Class,..." (a plugin under development, or a test's fake). A
    backend that fails to load is left out and its error kept in BROKEN, so one broken plugin
    cannot take the others down.
    """
    targets: dict[str, str] = dict(BUILTIN_BACKENDS)
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        targets[ep.name] = ep.value
    for item in filter(None, (os.environ.get("HARNESS_BACKENDS") or "").split(",")):
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
    return found


def resolve_backend_name(name: str, backends: dict[str, Backend] | None = None) -> str:
    """The canonical name of a backend or one of its aliases; InputError if none matches."""
    backends = available_backends() if backends is None else backends
    low = name.strip().lower()
    for canonical, backend in backends.items():
        if low == canonical or low in backend.aliases:
            return canonical
    known = []
    for canonical, backend in sorted(backends.items()):
        known.append("/".join((canonical,) + tuple(backend.aliases)))
    raise InputError(f"unknown backend {name!r}: expected one of {', '.join(known)}", field="backends")


def get_backend(name: str) -> Backend:
    """The backend registered under `name` or an alias of it."""
    backends = available_backends()
    return backends[resolve_backend_name(name, backends)]
