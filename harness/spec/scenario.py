"""Scenario files: safe YAML loading, pydantic validation, sweep expansion, --set overrides.

Every problem becomes an InputError whose message names the file, the field and what was expected.
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
import unicodedata
from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator

from harness.errors import InputError
from harness.seam.backend import available_backends, resolve_backend_name
from harness.spec.devices import normalize_device
from harness.worker.measure import Measure, process_bounds
from harness.workloads import WORKLOADS
from harness.workloads.base import NumbersNotBooleans

#: Largest scenario file read, in bytes.
MAX_FILE_BYTES = 1_000_000
#: Deepest nesting of YAML collections accepted.
MAX_DEPTH = 20
#: Most YAML alias uses accepted (guards against alias bombs).
MAX_ALIASES = 100
#: Most YAML values (nodes) a file may hold, every alias counted as the values it stands for: a
#: scenario has a few hundred; an alias bomb of 81 aliases under the alias limit expands to 9^9.
#: Counted while the file is parsed, so a refusal comes within a second.
MAX_NODES = 10_000
#: Most characters the scalars of a file may hold, every alias counted as what it stands for.
MAX_EXPANDED_CHARS = 1_000_000
#: Most scenarios (YAML documents) in one file.
MAX_DOCUMENTS = 100
#: Runs a plan may expand to unless --max-runs allows more.
DEFAULT_MAX_RUNS = 1000

class CpuThreads(NumbersNotBooleans):
    """The `cpu_threads:` block: the framework's CPU thread pools, set alike on every backend (null: its default)."""

    model_config = ConfigDict(extra="forbid")

    intra_op: int | None = Field(None, ge=1, le=4096)
    inter_op: int | None = Field(None, ge=1, le=4096)


def parse_resolution(value) -> int | str:
    """A capacity resolution: a whole number of images >= 1, or a share of the answer such as "2%"
    (more than 0, at most 50). ValueError says what was expected."""
    if isinstance(value, bool):
        raise ValueError("expected a whole number of images (e.g. 64) or a share of the answer (e.g. \"2%\")")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"expected at least 1 image, got {value}")
        return value
    text = str(value).strip()
    if text.endswith("%"):
        try:
            share = float(text[:-1])
        except ValueError:
            share = float("nan")
        if not 0 < share <= 50:
            raise ValueError(f"expected a share above 0% and at most 50%, got {text!r}")
        return f"{share:g}%"
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise ValueError(f"expected a whole number of images (e.g. 64) or a share of the answer (e.g. \"2%\"), got {value!r}")


class Capacity(NumbersNotBooleans):
    """The `capacity:` block: search for the largest batch_size that trains without running out of memory."""

    model_config = ConfigDict(extra="forbid")

    start: int = Field(1, ge=1, le=1_000_000)
    limit: int = Field(65536, ge=1, le=10_000_000)
    #: how close the answer must be: a number of images (the bracket's width), or a share of the answer,
    #: "2%" (the bracket at most 2% of the largest batch that fit)
    resolution: int | str = Field(1)

    @field_validator("resolution")
    @classmethod
    def _resolution(cls, value):
        return parse_resolution(value)


class Scenario(NumbersNotBooleans):
    """A framework-neutral scenario, as written in a scenario file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=200)
    workload: str
    description: str | None = Field(None, max_length=10_000)
    params: dict[str, Any] = Field(default_factory=dict)
    measure: Measure = Field(default_factory=Measure)
    backends: list[str] = Field(default_factory=lambda: ["torch", "tensorflow"], min_length=1, max_length=20)
    devices: list[str] = Field(default_factory=lambda: ["auto"], min_length=1, max_length=64)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    cpu_threads: CpuThreads = Field(default_factory=CpuThreads)
    capacity: Capacity | None = None

    @field_validator("name")
    @classmethod
    def _printable_name(cls, value: str) -> str:
        return printable_name(value)

    @field_validator("workload")
    @classmethod
    def _known_workload(cls, value: str) -> str:
        if value not in WORKLOADS:
            raise ValueError(f"unknown workload {value!r}: expected one of {', '.join(sorted(WORKLOADS))}")
        return value

    @field_validator("backends")
    @classmethod
    def _known_backends(cls, value: list[str]) -> list[str]:
        return _dedupe(resolve_backend(v) for v in value)

    @field_validator("devices")
    @classmethod
    def _known_devices(cls, value: list[str]) -> list[str]:
        out = []
        for v in value:
            try:
                out.append(normalize_device(v))
            except InputError as exc:
                raise ValueError(str(exc)) from None
        return _dedupe(out)

    @field_validator("sweep")
    @classmethod
    def _sweep_lists(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in value.items():
            if not values:
                raise ValueError(f"sweep of {key!r} is empty: give at least one value")
        return value


def _dedupe(items) -> list:
    seen: list = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


#: Characters that change how a line is shown rather than what it says: right-to-left overrides and isolates.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable_name(value: str) -> str:
    """A scenario name as given, if it shows as what it is on one line: ValueError for one of only spaces or one
    holding a control character (a newline would forge a line of the run summary, a NUL cut it short), saying
    which character and where."""
    if not value.strip():
        raise ValueError("expected a name with at least one visible character, got only spaces")
    for i, char in enumerate(value):
        if unicodedata.category(char) == "Cc" or char in _BIDI_CONTROLS:
            raise ValueError(f"expected a name without control characters; character {i + 1} is {ascii(char)} "
                             "(names are printed on one line in summaries, tables and reports)")
    return value


def resolve_backend(name: str) -> str:
    """Canonical backend name for a spelling (`tf` -> `tensorflow`); ValueError naming the choices."""

    if str(name).strip().lower() == "all":
        raise ValueError("'all' is a command-line choice; list the backends in the file")
    try:
        return resolve_backend_name(name)
    except InputError as exc:
        raise ValueError(str(exc)) from None


# --------------------------------------------------------------------------- loading


class _Refused(yaml.YAMLError):
    """A YAML file refused for its size or shape (not a syntax error), with where it was refused."""

    def __init__(self, message: str, mark=None):
        super().__init__(message)
        self.message = message
        self.mark = mark


def _expanded(node, memo: dict) -> tuple[int, int, int]:
    """(values, characters, depth of collections) of a composed node with every alias expanded.

    Memoized per node, so a node that many aliases share is measured once: linear in the file,
    however large its expansion."""
    key = id(node)
    if key in memo:
        return memo[key]
    if isinstance(node, yaml.ScalarNode):
        out = (1, len(node.value or ""), 0)
    else:
        children = node.value if isinstance(node, yaml.SequenceNode) else [part for pair in node.value for part in pair]
        sizes = [_expanded(child, memo) for child in children]
        out = (1 + sum(s[0] for s in sizes), sum(s[1] for s in sizes), 1 + max((s[2] for s in sizes), default=0))
    memo[key] = out
    return out


def _refuse_tag(loader, node):
    raise yaml.constructor.ConstructorError(
        None, None, f"tag {node.tag} is not accepted in a scenario file (plain values, lists and mappings only)",
        node.start_mark)


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader (no code execution) that refuses deep nesting, alias bombs, recursive aliases,
    duplicate keys, binary/set/ordered-map tags, and files that expand (aliases counted as what
    they stand for) beyond MAX_NODES values or MAX_EXPANDED_CHARS characters: counted while
    composing, before anything is constructed or validated."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._nodes = 0
        self._chars = 0
        self._documents = 0
        self._open_anchors: list[str] = []
        self._sizes: dict = {}

    def _count(self, nodes: int, chars: int, mark) -> None:
        self._nodes += nodes
        self._chars += chars
        if self._nodes > MAX_NODES:
            raise _Refused(f"the file expands to more than {MAX_NODES} values (aliases counted as the values they "
                           "stand for); a scenario has a few hundred", mark)
        if self._chars > MAX_EXPANDED_CHARS:
            raise _Refused(f"the file expands to more than {MAX_EXPANDED_CHARS} characters of values (aliases counted "
                           "as what they stand for)", mark)

    def compose_document(self):
        self._documents += 1
        if self._documents > MAX_DOCUMENTS:
            raise _Refused(f"more than {MAX_DOCUMENTS} documents (scenarios separated by ---) in one file",
                           self.peek_event().start_mark)
        return super().compose_document()

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refused(f"more than {MAX_ALIASES} aliases", event.start_mark)
            if event.anchor in self._open_anchors:
                raise _Refused(f"alias *{event.anchor} refers to a value that contains it (a recursive structure)",
                               event.start_mark)
            node = super().compose_node(parent, index)
            nodes, chars, depth = _expanded(node, self._sizes)
            if self._depth + max(depth, 1) > MAX_DEPTH:
                raise _Refused(f"nesting deeper than {MAX_DEPTH} levels once aliases are expanded", event.start_mark)
            self._count(nodes, chars, event.start_mark)
            return node
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        self._depth += 1
        if anchor:
            self._open_anchors.append(anchor)
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nesting deeper than {MAX_DEPTH} levels", event.start_mark)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor:
                self._open_anchors.pop()
        self._count(1, len(node.value or "") if isinstance(node, yaml.ScalarNode) else 0, event.start_mark)
        return node

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        seen: dict = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                ident = (key.tag, key.value)
                if ident in seen:
                    raise _Refused(f"duplicate key {key.value!r} (first at line {seen[ident].line + 1}); each key may "
                                   "appear once in a mapping", key.start_mark)
                seen[ident] = key.start_mark
        return node


for _tag in ("binary", "set", "omap", "pairs"):
    _LimitedLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)


def parse_yaml(text: str, source: str, *, documents: bool = False) -> Any:
    """Parse YAML text safely (a list of every document if `documents`); InputError with the line
    and column of a syntax error or of what was refused."""
    try:
        if documents:
            return list(yaml.load_all(text, Loader=_LimitedLoader))  # noqa: S506 - a SafeLoader subclass
        return yaml.load(text, Loader=_LimitedLoader)  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        mark = exc.mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"{source}: refused{where}: {exc.message}", source=source) from None
    except yaml.reader.ReaderError as exc:  # a control character, a NUL: one line, with where it is
        before = text[: exc.position] if isinstance(exc.position, int) else ""
        where = f" at line {before.count(chr(10)) + 1}, column {len(before) - (before.rfind(chr(10)) + 1) + 1}"
        code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
        raise InputError(f"{source}: not valid YAML{where}: character U+{code:04X} is not allowed in YAML text",
                         source=source) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"{source}: not valid YAML{where}: {exc.problem or exc}", source=source) from None
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError, MemoryError) as exc:
        raise InputError(f"{source}: refused: {exc}", source=source) from None


def read_scenario_documents(path: str | os.PathLike) -> list[dict]:
    """Read and safely parse a scenario file into its mappings, one per YAML document (`---`).

    A file may hold several scenarios (several workloads measured in one session); each document
    must be a mapping. InputError for any problem.
    """
    source = str(path)
    p = Path(path)
    if not p.exists():
        raise InputError(f"{source}: no such file (expected a scenario YAML file)", source=source)
    if not p.is_file():
        raise InputError(f"{source}: not a file (expected a scenario YAML file)", source=source)
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise InputError(f"{source}: {size} bytes is too large for a scenario file (limit {MAX_FILE_BYTES})", source=source)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{source}: cannot read: {exc}", source=source) from None
    documents = [d for d in parse_yaml(text, source, documents=True) if d is not None]
    if not documents:
        raise InputError(f"{source}: the file is empty; expected a mapping with at least `name` and `workload`", source=source)
    for i, data in enumerate(documents, 1):
        if not isinstance(data, dict):
            where = f" (document {i})" if len(documents) > 1 else ""
            raise InputError(
                f"{source}{where}: the file is a {type(data).__name__}; expected a mapping with at least `name` and `workload`",
                source=source,
            )
    return documents


def read_scenario_file(path: str | os.PathLike) -> dict:
    """The first scenario mapping of a file (see read_scenario_documents)."""
    return read_scenario_documents(path)[0]


def known_fields(model, loc: tuple) -> list[str]:
    """The field names a pydantic `model` allows where `loc` (a field path, its last part the unknown
    name) ends: the fields of the model that the path's other parts lead to; [] where it leads to none."""
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        model = getattr(field, "annotation", None) if field is not None else None
    return list(getattr(model, "model_fields", {}) or [])


def did_you_mean(name: str, choices) -> str:
    """'; did you mean `X`?' for the closest of `choices` to a mistyped `name` (difflib), else ''."""
    close = difflib.get_close_matches(str(name), list(choices), n=1)
    return f"; did you mean `{close[0]}`?" if close else ""


def _describe(error: dict, model=None) -> tuple[str, str]:
    loc = ".".join(str(part) for part in error.get("loc", ()) if part not in ("function-after[_dims(), GemmParams]",))
    msg = error.get("msg", "invalid")
    value = error.get("input")
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        path = tuple(error.get("loc", ()))
        msg = "unknown field" + (did_you_mean(path[-1], known_fields(model, path)) if model and path else "")
    elif kind == "missing":
        msg = "required field is missing"
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    if kind not in ("missing",) and not isinstance(value, dict):
        msg = f"{msg} (got {shown})"
    return loc, msg


def format_validation_error(exc: ValidationError, source: str, prefix: str = "", model=None) -> InputError:
    """One paragraph naming the file, each bad field's path and what was expected; an unknown field of
    `model` (the pydantic model validated) says which known field it is closest to."""
    parts = []
    first_field = None
    for error in exc.errors()[:8]:
        loc, msg = _describe(error, model)
        loc = f"{prefix}{loc}" if loc else prefix.rstrip(".") or "(top level)"
        first_field = first_field or loc
        parts.append(f"field `{loc}`: {msg}")
    more = len(exc.errors()) - 8
    if more > 0:
        parts.append(f"and {more} more")
    return InputError(f"{source}: " + "; ".join(parts), source=source, field=first_field)


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
        if key.startswith("measure."):
            measure = dict(out.get("measure") or {})
            measure[key.split(".", 1)[1]] = value
            out["measure"] = measure
        elif key in ("seed", "name"):
            out[key] = value
        elif key.startswith("cpu_threads."):
            threads = dict(out.get("cpu_threads") or {})
            threads[key.split(".", 1)[1]] = value
            out["cpu_threads"] = threads
        elif "." in key:  # BACKEND.OPTION: a backend's option (a list sweeps it)
            backend, option = key.split(".", 1)
            try:
                resolve_backend(backend)
            except ValueError:
                raise InputError(f"--set {key}: expected a parameter name, measure.FIELD, cpu_threads.FIELD, "
                                 "BACKEND.OPTION, seed or name", source="--set", field=key) from None
            sweep = dict(out.get("sweep") or {})
            options = {k: dict(v) if isinstance(v, dict) else v for k, v in (out.get("options") or {}).items()}
            if isinstance(value, list):
                sweep[key] = value
            else:
                options.setdefault(backend, {})[option] = value
                sweep.pop(key, None)
            out["sweep"] = sweep
            out["options"] = options
        else:
            params = dict(out.get("params") or {})
            sweep = dict(out.get("sweep") or {})
            if isinstance(value, list):
                sweep[key] = value
                params.pop(key, None)
            else:
                params[key] = value
                sweep.pop(key, None)
            out["params"] = params
            out["sweep"] = sweep
    return out


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
    runs = count_points(scenario) * len(scenario.backends) * len(scenario.devices) * process_bounds(
        scenario.measure.model_dump())[0]
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
