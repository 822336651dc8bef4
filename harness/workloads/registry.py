"""The one registry of workloads: the bundled ones and every `harness.workloads` entry point, alike.

A workload package registers its `Workload` object under the `harness.workloads` entry-point group
(`my_model = my_package:MY_MODEL`); the bundled GEMM and ResNet-50 register the same way in setup.cfg and
are also found from a source checkout whose entry points are not installed. `HARNESS_WORKLOADS=name=module:ATTR`
adds one while it is being developed (or a test's). Every place that needs a workload asks this registry
through `WORKLOADS`, a read-only mapping loaded at its first use: importing a workload's package is cheap (no
framework import), and a package that fails to load is left out with its error kept in BROKEN, so one broken
plugin cannot take the others down.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
from collections.abc import Iterator, Mapping

from harness.machine.variables import variables
from harness.workloads.base import Workload
from harness.workloads.training import missing_training_fields

ENTRY_POINT_GROUP = "harness.workloads"

#: The bundled workloads, also found when the package's entry points are not installed (a source checkout).
BUILTIN_WORKLOADS = {"gemm": "harness.workloads.gemm:GEMM",
                     "resnet50_train": "harness.workloads.resnet50_train:RESNET50_TRAIN",
                     "gpt_train": "harness.workloads.gpt_train:GPT_TRAIN"}

#: Workloads that failed to load, by entry-point name, with the error (shown by `harness list`).
BROKEN: dict[str, str] = {}


def _load(target: str) -> Workload:
    module, _, attr = target.partition(":")
    workload = getattr(importlib.import_module(module), attr)
    if not isinstance(workload, Workload):
        raise TypeError(f"{target} is a {type(workload).__name__}, not a harness.workloads.Workload")
    missing = missing_training_fields(workload.params_model) if workload.training is not None else []
    if missing:
        raise TypeError(f"training workload {workload.name}: its parameter model lacks {', '.join(missing)} "
                        "(extend harness.workloads.training.TrainingParams)")
    return workload


def _targets(extra: str) -> dict[str, tuple[str, str]]:
    """name -> (module:ATTR, the distribution that registers it) from every source, later ones winning."""
    targets = {name: (target, "harness") for name, target in BUILTIN_WORKLOADS.items()}
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or ep.value.partition(":")[0].split(".")[0]
        targets[ep.name] = (ep.value, dist)
    for item in filter(None, extra.split(",")):
        name, _, target = item.partition("=")
        targets[name.strip()] = (target.strip(), "HARNESS_WORKLOADS")
    return targets


class _Registry(Mapping):
    """name -> Workload, read once per value of HARNESS_WORKLOADS."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[dict[str, Workload], dict[str, str]]] = {}

    def _loaded(self) -> tuple[dict[str, Workload], dict[str, str]]:
        extra = variables().workloads
        if extra not in self._cache:
            found: dict[str, Workload] = {}
            sources: dict[str, str] = {}
            for name, (target, source) in _targets(extra).items():
                try:
                    workload = _load(target)
                except Exception as exc:  # noqa: BLE001 - one broken plugin must not take the others down
                    BROKEN[name] = f"{type(exc).__name__}: {exc}"
                    continue
                found[workload.name] = workload
                sources[workload.name] = source
            self._cache[extra] = (found, sources)
        return self._cache[extra]

    def __getitem__(self, name: str) -> Workload:
        return self._loaded()[0][name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded()[0])

    def __len__(self) -> int:
        return len(self._loaded()[0])

    def source(self, name: str) -> str:
        """The distribution a workload comes from (`harness` for the bundled ones)."""
        return self._loaded()[1][name]


#: Every registered workload by name (a read-only mapping).
WORKLOADS = _Registry()


def get_workload(name: str) -> Workload:
    """The workload registered under `name`; KeyError if none."""
    return WORKLOADS[name]
