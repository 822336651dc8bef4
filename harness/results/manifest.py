"""The stores' manifest: which stores back the published results page, what each measured, and the
parts of the page drawn from them.

The manifest (YAML, beside the stores) repeats what each store records about itself (dates,
hardware, driver, framework versions) so that a reader of the manifest alone knows it, and
`check_store` holds it to the records: an entry that disagrees with its store is bad input, so the
page never claims a date, device or version the records do not carry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import InputError
from harness.results.compare import load_records
from harness.results.record import Result

#: Packages whose versions a manifest entry states, as the records' environment names them.
SOFTWARE = ("torch", "tensorflow", "keras", "jax", "flax")


class StoreEntry(BaseModel):
    """One store: what it measured, when, on what, with which software, how, and whether the page uses it."""

    model_config = ConfigDict(extra="forbid")

    file: str
    log: str | None = None
    measured: str
    dates: list[str]
    hardware: str
    driver: str | None = None
    software: dict[str, str]
    commit: str | None = Field(None, description="the repository commit that measured it, where recorded")
    command: str
    current: bool = True


#: A section's filter: a field (or a neutral parameter) and the value or values kept.
Where = dict[str, str | int | float | list[str | int | float]]


class SectionStore(BaseModel):
    """A store of a section and a filter of its own, applied to that store's records before the section's
    `where`: part of an earlier store beside a later one that measured the rest again, say. A section names
    a store it takes whole by its file name alone."""

    model_config = ConfigDict(extra="forbid")

    file: str
    where: Where = {}


class PageSection(BaseModel):
    """One table of the page: the records of `stores` (filtered by `where`) compared `by` a field
    (kind `compare`), or their values laid out with a row per value of the `rows` fields and a column
    per value of the `by` fields (kind `values`: for figures no comparison pairs, such as the largest
    batch, which is itself the batch size a comparison would match on), or their profile breakdowns side
    by side, a row per class and a column per value of the `by` fields (kind `breakdown`), or what they
    took, a row per value of the `rows` fields (a part of a file run a precision a session, say) and a row
    adding them up: runs, processes a configuration, first steps, timed blocks, run time (kind `time`)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9-]+$")
    title: str
    stores: list[SectionStore]
    by: list[str]
    baseline: str | None = None
    metric: str = "median"
    where: Where = {}
    columns: list[str] = []
    rows: list[str] = []
    kind: Literal["compare", "values", "breakdown", "time"] = "compare"

    @field_validator("stores", mode="before")
    @classmethod
    def _names_are_whole_stores(cls, stores):
        return [{"file": s} if isinstance(s, str) else s for s in stores] if isinstance(stores, list) else stores


class AnswerPart(BaseModel):
    """A workload of the page's first screen: its label and the comparison sections whose rows it draws on."""

    model_config = ConfigDict(extra="forbid")

    label: str
    sections: list[str]


class Answer(BaseModel):
    """The page's answer: the first screen's workloads, and the file (beside the manifest) of the answer's prose,
    a template whose figures the generator fills from the page's tables."""

    model_config = ConfigDict(extra="forbid")

    template: str
    parts: list[AnswerPart]


class Manifest(BaseModel):
    """The manifest file: its stores, the page's answer, and the page's sections, in page order."""

    model_config = ConfigDict(extra="forbid")

    title: str
    stores: list[StoreEntry]
    answer: Answer | None = None
    sections: list[PageSection]

    def entry(self, file: str) -> StoreEntry:
        """The entry of store `file` (KeyError if the manifest has none)."""
        return next(s for s in self.stores if s.file == file)


def load_manifest(path: str | Path) -> Manifest:
    """The manifest at `path`, validated; InputError naming the file and the field where it is unsound,
    or where a section names a store the manifest does not list or one it does not mark current."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
        manifest = Manifest.model_validate(raw)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the manifest ({exc.strerror})", source=str(path)) from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not YAML: {exc}", source=str(path)) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{path}: {where}: {first['msg']}", source=str(path), field=where) from None
    current = {s.file for s in manifest.stores if s.current}
    for section in manifest.sections:
        for store in section.stores:
            if store.file not in current:
                raise InputError(f"{path}: sections.{section.id}.stores: {store.file!r} is not a current store of the "
                                 f"manifest (current: {', '.join(sorted(current))})", source=str(path),
                                 field=f"sections.{section.id}.stores")
    compared = {s.id for s in manifest.sections if s.kind == "compare"}
    for i, part in enumerate(manifest.answer.parts if manifest.answer else []):
        for name in part.sections:
            if name not in compared:
                raise InputError(f"{path}: answer.parts.{i}.sections: {name!r} is not a comparison section of the "
                                 f"manifest (they are: {', '.join(sorted(compared))})", source=str(path),
                                 field=f"answer.parts.{i}.sections")
    return manifest


def store_facts(records: list[Result]) -> dict:
    """What the records of one store say about themselves: dates (UTC, of their starts), hardware
    ('N x NAME' from the environment's GPUs), the driver and the framework versions."""
    dates = sorted({r.started_at[:10] for r in records if r.started_at})
    hardware, drivers, software = set(), set(), {}
    for record in records:
        env = record.env
        if env.gpus:
            names = sorted({g.name for g in env.gpus})
            hardware.add(f"{len(env.gpus)} x {', '.join(names)}")
        if env.driver:
            drivers.add(env.driver)
        versions = dict(env.packages or {})
        # the framework's own version (a plugin's framework is not in `packages`; torch's adds its CUDA build)
        if record.backend in SOFTWARE and record.framework_version:
            versions[record.backend] = record.framework_version
        for name in SOFTWARE:
            if name in versions and versions[name]:
                software.setdefault(name, set()).add(versions[name])
    return {"dates": dates, "hardware": " / ".join(sorted(hardware)) or "CPU only",
            "driver": " / ".join(sorted(drivers)) or None,
            "software": {k: " / ".join(_distinct(v)) for k, v in sorted(software.items())}}


def _distinct(versions: set[str]) -> list[str]:
    # a package's metadata says 2.11.0 where the framework itself says 2.11.0+cu130: one version, the fuller name
    return sorted(v for v in versions if not any(o.startswith(v + "+") for o in versions))


def check_store(entry: StoreEntry, records: list[Result], manifest_path: str | Path) -> None:
    """InputError where `entry` states a date, hardware, driver or version its store's records do not."""
    facts = store_facts(records)
    stated = {"dates": entry.dates, "hardware": entry.hardware, "driver": entry.driver, "software": entry.software}
    for field, value in stated.items():
        if value != facts[field]:
            raise InputError(f"{manifest_path}: stores.{entry.file}.{field}: the manifest says {value!r}, the "
                             f"store's records say {facts[field]!r}", source=str(manifest_path),
                             field=f"stores.{entry.file}.{field}")


def load_stores(manifest: Manifest, folder: Path, manifest_path: str | Path) -> dict[str, list[Result]]:
    """The records of every store of the manifest, each checked against its entry (`check_store`)."""
    stores = {}
    for entry in manifest.stores:
        path = folder / entry.file
        if not path.is_file():
            raise InputError(f"{manifest_path}: stores.{entry.file}: no such store in {folder}",
                             source=str(manifest_path), field=f"stores.{entry.file}")
        records = load_records(str(path))
        check_store(entry, records, manifest_path)
        stores[entry.file] = records
    return stores
