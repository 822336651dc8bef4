"""Scenarios loaded: a file read, `--set` overrides applied, every field and sweep point validated.

Every problem becomes an InputError whose message names the file, the field and what was expected.
"""

from __future__ import annotations

import itertools
import math
import os
from typing import Any

from pydantic import ValidationError

from harness.errors import InputError, did_you_mean
from harness.scenario.messages import format_validation_error
from harness.scenario.reading import parse_yaml, read_scenario_documents
from harness.scenario.schema import Scenario, resolve_backend
from harness.seam.backend import available_backends
from harness.workloads import WORKLOADS

#: Runs a plan may expand to unless --max-runs allows more.
DEFAULT_MAX_RUNS = 1000


def parse_override(text: str) -> tuple[str, Any]:
    """Split a `--set KEY=VALUE`; the value is parsed as a YAML scalar or flow list."""
    if "=" not in text:
        raise InputError(f"--set {text!r}: expected KEY=VALUE (for example --set precision=bf16)", source="--set")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or not all(part.replace("_", "").isalnum() for part in key.split(".")):
        raise InputError(f"--set {text!r}: {key!r} is not a parameter name (letters, digits, '_', '.')", source="--set")
    if len(raw) > 10_000:
        raise InputError(f"--set {key}: value too long", source="--set", field=key)
    value = parse_yaml(raw, f"--set {key}") if raw.strip() else ""
    if isinstance(value, dict):
        raise InputError(f"--set {key}: expected a value or a list of values, got a mapping", source="--set", field=key)
    return key, value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """A copy of the raw scenario mapping with each `--set KEY=VALUE` applied.

    `KEY` is a workload parameter (a list value sweeps over it), `measure.FIELD`, `cpu_threads.FIELD`,
    `BACKEND.OPTION` (`tensorflow.keras=tf_keras`; a list sweeps it), `seed` or `name`.
    Setting a swept parameter replaces its sweep.
    """
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for text in overrides:
        key, value = parse_override(text)
        block, dot, field = key.partition(".")
        if block in ("measure", "cpu_threads") and dot:
            _block(out, block)[field] = value
        elif key in ("seed", "name"):
            out[key] = value
        elif dot:  # BACKEND.OPTION: a backend's option (a list sweeps it)
            try:
                resolve_backend(block)
            except ValueError:
                raise InputError(f"--set {key}: expected a parameter name, measure.FIELD, cpu_threads.FIELD, "
                                 "BACKEND.OPTION, seed or name", source="--set", field=key) from None
            sweep, options = _block(out, "sweep"), _block(out, "options")
            if isinstance(value, list):
                sweep[key] = value
            else:
                _block(options, block)[field] = value
                sweep.pop(key, None)
        else:
            sweep, params = _block(out, "sweep"), _block(out, "params")
            if isinstance(value, list):
                sweep[key] = value
                params.pop(key, None)
            else:
                params[key] = value
                sweep.pop(key, None)
    return out


def _block(document: dict, name: str) -> dict:
    """A copy of one block of a raw document (empty where it has none), put in its place, for an override to change
    (the mapping the caller gave stays as it was)."""
    document[name] = copy = dict(document.get(name) or {})
    return copy


def validate_scenario(data: dict, source: str, *, max_runs: int = DEFAULT_MAX_RUNS) -> Scenario:
    """Validate a raw mapping into a Scenario, params and every sweep point included.

    A scenario that expands to more than `max_runs` runs is refused before anything is expanded.
    """
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise format_validation_error(exc, source, model=Scenario) from None
    _check_run_count(scenario, source, max_runs)
    workload = WORKLOADS[scenario.workload]
    fields = set(workload.params_model.model_fields)
    scenario.options = _validated_options(scenario, source)
    scenario.sweep = _validated_sweep(scenario, source, fields)
    _check_sweep_points(scenario, source, workload)
    if scenario.capacity is not None and "batch_size" not in fields:
        raise InputError(f"{source}: field `capacity`: workload {scenario.workload} has no batch_size to search", source=source, field="capacity")
    return scenario


def _check_run_count(scenario: Scenario, source: str, max_runs: int) -> None:
    runs = (count_points(scenario) * len(scenario.backends) * len(scenario.devices)
            * scenario.measure.process_bounds()[0])
    if runs > max_runs:
        raise InputError(
            f"{source}: field `sweep`: expands to {runs} runs (points x backends x devices x processes, the least of measure.processes: auto), more than the "
            f"limit of {max_runs}; narrow the sweep or allow it with --max-runs {runs}",
            source=source,
            field="sweep",
        )


def _validated_options(scenario: Scenario, source: str) -> dict:
    """The `options:` block with backend aliases resolved and each backend's options validated, defaults filled."""
    options, spelled = {}, {}
    for key, values in scenario.options.items():
        try:
            name = resolve_backend(key)
            if name in spelled:  # `tf:` and `tensorflow:` both: one would silently win
                raise ValueError(f"backend {name} is given options twice, as `{spelled[name]}` and as `{key}`; "
                                 "expected them once, under one name")
            spelled[name] = key
            options[name] = available_backends()[name].validate_options(values if isinstance(values, dict) else {})
        except ValueError as exc:
            raise InputError(f"{source}: field `options.{key}`: {exc}", source=source, field=f"options.{key}") from None
    return options


def _validated_sweep(scenario: Scenario, source: str, fields: set[str]) -> dict:
    """The `sweep:` block with BACKEND.OPTION keys resolved to the backend's own name, every key checked."""
    renamed = {}
    for key, values in scenario.sweep.items():
        if "." in key:  # BACKEND.OPTION: sweeps one backend's option; the other backends run once
            backend_key, option = key.split(".", 1)
            try:
                name = resolve_backend(backend_key)
                for value in values:
                    available_backends()[name].validate_options({**scenario.options.get(name, {}), option: value})
            except ValueError as exc:
                raise InputError(f"{source}: field `sweep.{key}`: {exc}", source=source, field=f"sweep.{key}") from None
            if f"{name}.{option}" in renamed:  # `tf.keras` and `tensorflow.keras` both: one would silently win
                raise InputError(f"{source}: field `sweep.{key}`: option {option} of backend {name} is swept twice, "
                                 "under two names of the backend; expected it once", source=source,
                                 field=f"sweep.{key}")
            renamed[f"{name}.{option}"] = values
            continue
        if key not in fields:
            raise InputError(
                f"{source}: field `sweep.{key}`: not a parameter of workload {scenario.workload} "
                f"(expected one of {', '.join(sorted(fields))}, or BACKEND.OPTION such as tensorflow.keras)",
                source=source,
                field=f"sweep.{key}",
            )
        renamed[key] = values
    return renamed


def _check_sweep_points(scenario: Scenario, source: str, workload) -> None:
    """Every sweep point's params valid for the workload; the error names the point."""
    for point in sweep_points(scenario):
        point = {k: v for k, v in point.items() if "." not in k}
        try:
            workload.validate({**scenario.params, **point})
        except ValidationError as exc:
            err = format_validation_error(exc, source, prefix="params.", model=workload.params_model)
            if point:
                swept = ", ".join(f"{k}={v!r}" for k, v in point.items())
                raise InputError(f"{err} (at sweep point {swept})", source=source, field=err.field) from None
            raise err from None


def sweep_points(scenario: Scenario) -> list[dict[str, Any]]:
    """The cartesian product of the sweep, in file order; [{}] without a sweep."""
    if not scenario.sweep:
        return [{}]
    keys = list(scenario.sweep)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(scenario.sweep[k] for k in keys))]


def count_points(scenario: Scenario) -> int:
    """How many sweep points the scenario expands to, without expanding it."""
    return math.prod(len(v) for v in scenario.sweep.values()) if scenario.sweep else 1


def _workload_of(data: dict):
    """The Workload a raw document names, or None where it names none (validation reports that)."""
    name = data.get("workload")
    return WORKLOADS.get(name) if isinstance(name, str) else None


def named_documents(documents: list, names, source: str) -> list:
    """The documents whose `name` is one of `names` (every one when none is given); InputError for a name that
    is no document's."""
    if not names:
        return documents
    known = [d.get("name") for d in documents if isinstance(d, dict)]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"--document {unknown[0]}: {source} has no document of that name (it has: "
                         f"{', '.join(map(str, known))})", source=source, field="--document")
    return [d for d in documents if isinstance(d, dict) and d.get("name") in names]


def load_scenarios(
    path: str | os.PathLike, overrides: list[str] | None = None, *, max_runs: int = DEFAULT_MAX_RUNS,
    documents: tuple[str, ...] = (),
) -> list[Scenario]:
    """Read, override and validate every scenario of a file (only those named in `documents`, where given, so
    that a `--set` meant for one document is not checked against the others); InputError (exit 2) for any
    problem.

    A `--set` of a workload parameter applies to the documents whose workload has it; one that
    no document has is an error. `max_runs` bounds the runs of all documents together.
    """
    source = str(path)
    documents = named_documents(read_scenario_documents(path), documents, source)
    overrides = list(overrides or [])
    for text in overrides:
        key, _ = parse_override(text)
        if "." in key or key in ("seed", "name"):
            continue
        fields = [set(w.params_model.model_fields) for w in map(_workload_of, documents) if w is not None]
        if fields and not any(key in f for f in fields):
            known = sorted(set().union(*fields))
            raise InputError(f"--set {key}: not a parameter of this scenario's workload(s){did_you_mean(key, known)} "
                             f"(expected one of {', '.join(known)})",
                             source="--set", field=key)
    scenarios = []
    for i, data in enumerate(documents, 1):
        where = f"{source} (document {i})" if len(documents) > 1 else source
        workload = _workload_of(data)
        mine = [
            o for o in overrides
            if workload is None or "." in parse_override(o)[0] or parse_override(o)[0] in ("seed", "name")
            or parse_override(o)[0] in workload.params_model.model_fields
        ]
        scenarios.append(validate_scenario(apply_overrides(data, mine) if mine else data, where, max_runs=max_runs))
    runs = sum(count_points(s) * len(s.backends) * len(s.devices) for s in scenarios)
    if runs > max_runs:
        raise InputError(f"{source}: its scenarios expand to {runs} runs, more than the limit of {max_runs}; "
                         f"allow it with --max-runs {runs}", source=source, field="sweep")
    return scenarios


def load_scenario(
    path: str | os.PathLike, overrides: list[str] | None = None, *, max_runs: int = DEFAULT_MAX_RUNS
) -> Scenario:
    """The first scenario of a file, read, overridden and validated (see load_scenarios)."""
    return load_scenarios(path, overrides, max_runs=max_runs)[0]
