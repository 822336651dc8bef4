"""Which store serves a location: one registry, scheme -> store class, like the backends' (harness.seam.backend).

Sources, later ones winning: the built-in stores (also found from a source checkout, where no entry point
is installed), the `harness.stores` entry points (`postgresql = harness.results.store.postgres:PostgresStore`:
the name is the scheme), and HARNESS_STORES="scheme=module:Class,..." (a store under development, or a
test's). Schemes are compared in lower case. A class is imported only when its scheme is asked for, so an
SQLite store never imports psycopg, and a plugin that fails to load is reported when its scheme is used
(and kept in BROKEN), never taking the other stores down.

A store class is called as `cls(location, readonly=...)` with a parsed `StoreLocation`, and answers
`cls.exists(location)`: whether there is a store to read there (contract.StoreClass).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import re
import sys

from harness.errors import StoreError
from harness.machine.variables import variables
from harness.results.store.location import (
    ANY_SCHEME,
    PATH_SCHEME,
    StoreLocation,
    redact_urls,
)

ENTRY_POINT_GROUP = "harness.stores"
#: The bundled stores, by scheme (an SQLite file is given by its path: scheme `sqlite`).
BUILTIN_STORES = {
    PATH_SCHEME: "harness.results.store.sqlite:SQLiteStore",
    "postgresql": "harness.results.store.postgres:PostgresStore",
    "postgres": "harness.results.store.postgres:PostgresStore",
}

#: Store classes that failed to load, by scheme, with the error.
BROKEN: dict[str, str] = {}
_TARGETS: dict[tuple, dict[str, str]] = {}
_CLASSES: dict[str, type] = {}


def store_targets() -> dict[str, str]:
    """Every registered scheme (lower case) -> the `module:Class` that serves it; nothing imported. Read once per
    value of HARNESS_STORES and of sys.path (where entry points are found)."""
    extra = variables().stores
    key = (extra, tuple(sys.path))
    if key in _TARGETS:
        return _TARGETS[key]
    targets = dict(BUILTIN_STORES)
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        targets[ep.name.strip().lower()] = ep.value
    for item in filter(None, extra.split(",")):
        scheme, _, target = item.partition("=")
        targets[scheme.strip().lower()] = target.strip()
    _TARGETS[key] = targets
    return targets


def _load(target: str) -> type:
    """The class at `module:Class`, checked to be a store class (ImportError, AttributeError, TypeError...)."""
    if target not in _CLASSES:
        module, _, attr = target.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        if not callable(cls) or not callable(getattr(cls, "exists", None)):
            raise TypeError(f"{target} is not a store class (a class called with a location, with exists(location))")
        _CLASSES[target] = cls
    return _CLASSES[target]


def store_class(location: StoreLocation) -> type:
    """The store class registered for the location's scheme. StoreError (one line, exit 2) for a scheme nothing
    registers, naming those that are, and for one whose class fails to load, naming its error."""
    targets = store_targets()
    target = targets.get(location.scheme)
    if target is None:
        known = ", ".join(f"{s}://" for s in sorted(targets) if s != PATH_SCHEME)
        broken = f"; failed to load: {', '.join(sorted(BROKEN))}" if BROKEN else ""
        raise StoreError(f"store {location.display}: no store is registered for the scheme {location.scheme}://; "
                         f"expected the path of an SQLite file or a URL of {known}{broken}",
                         source=location.display, field="--store")
    try:
        return _load(target)
    except Exception as exc:  # noqa: BLE001 - any failure of a plugin's import is that plugin's, said in one line
        BROKEN[location.scheme] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
        raise StoreError(f"store {location.display}: the store registered for {location.scheme}:// ({target}) failed "
                         f"to load: {BROKEN[location.scheme]}", source=location.display, field="--store") from None


def redact(text: str) -> str:
    """Text with the password of every URL of a registered store scheme taken out (a command line, an environment
    value, a message)."""
    schemes = "|".join(re.escape(s) for s in sorted(store_targets(), key=len, reverse=True) if s != PATH_SCHEME)
    return redact_urls(text, schemes or ANY_SCHEME)
