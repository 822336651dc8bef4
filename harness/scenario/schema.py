"""The scenario file's schema: what a scenario, its capacity search and its CPU threads may say."""

from __future__ import annotations

import unicodedata
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from harness.errors import InputError
from harness.fields import NumbersNotBooleans
from harness.machine.devices import normalize_device
from harness.seam.backend import resolve_backend_name
from harness.timing.settings import Measure
from harness.workloads import WORKLOADS


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


#: Steps a capacity probe trains by default, its first included: the answer is a batch that trained this many, so
#: that an allocator that fragments (memory reserved but unusable, growing over a run's first steps) runs out in
#: the search rather than in a user's run some steps later; few enough to repeat a dozen times.
CAPACITY_STEPS = 10


class Capacity(NumbersNotBooleans):
    """The `capacity:` block: search for the largest batch_size that trains without running out of memory."""

    model_config = ConfigDict(extra="forbid")

    start: int = Field(1, ge=1, le=1_000_000)
    limit: int = Field(65536, ge=1, le=10_000_000)
    #: how close the answer must be: a number of images (the bracket's width), or a share of the answer,
    #: "2%" (the bracket at most 2% of the largest batch that fit)
    resolution: int | str = Field(1)
    #: the steps each probe trains, its first included (fewer than the default only to test the search itself)
    steps: int = Field(CAPACITY_STEPS, ge=2, le=10_000)

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
#: Unicode categories a name may not hold: controls (Cc: newline, NUL, escape), format characters that show as
#: nothing (Cf: zero-width space, U+200F, the byte-order mark U+FEFF), line and paragraph separators (Zl, Zp:
#: U+2028, U+2029, which end a line in many viewers), lone surrogates (Cs).
_UNSHOWN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def printable_name(value: str) -> str:
    """A scenario name as given, if it shows as what it is on one line: ValueError for one of only spaces or one
    holding a control, invisible or line-separator character (a newline would forge a line of the run summary, a
    NUL cut it short, a zero-width space make two names look one), saying which character and where."""
    if not value.strip():
        raise ValueError("expected a name with at least one visible character, got only spaces")
    for i, char in enumerate(value):
        if unicodedata.category(char) in _UNSHOWN or char in _BIDI_CONTROLS:
            raise ValueError(f"expected a name without control, invisible or line-separator characters; character "
                             f"{i + 1} is {ascii(char)} (names are printed on one line in summaries, tables and "
                             "reports, and must read as what they are)")
    return value


def resolve_backend(name: str) -> str:
    """Canonical backend name for a spelling (`tf` -> `tensorflow`); ValueError naming the choices."""

    if str(name).strip().lower() == "all":
        raise ValueError("'all' is a command-line choice; list the backends in the file")
    try:
        return resolve_backend_name(name)
    except InputError as exc:
        raise ValueError(str(exc)) from None
