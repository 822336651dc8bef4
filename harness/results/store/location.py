"""Where a store is: a `--store` value parsed once into its scheme, what the store opens, and how it is named.

A value with `SCHEME://` in front is a URL, its scheme compared in lower case (`POSTGRESQL://` is
`postgresql://`); anything else is the path of an SQLite file (scheme `sqlite`). The registry
(`registry`) picks the store class by the scheme. A URL's password stays in `text` and `target`, which
only the store reads to connect; every message names the store by `display`, which has none.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import StoreError

#: The store a command uses when neither --store nor HARNESS_STORE names one.
DEFAULT_STORE = "harness.db"
#: The scheme of a location given as a plain path: an SQLite file.
PATH_SCHEME = "sqlite"
#: Any URL scheme (RFC 3986): a letter, then letters, digits, `+`, `-` or `.`.
ANY_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*"

_URL = re.compile(rf"^\s*({ANY_SCHEME})://(.*)$", re.DOTALL)
_QUERY_PASSWORD = re.compile(r"([?&])password=[^&\s]*&?")


def redact_urls(text: str, schemes: str = ANY_SCHEME) -> str:
    """Text with the password of every URL of `schemes` (a pattern; any scheme by default, compared in any case)
    taken out, and every `?password=` or `&password=` parameter (a command line, a message, a URL)."""
    userinfo = re.compile(rf"((?:{schemes})://[^:/@\s]*):[^@\s]*@", re.IGNORECASE)
    text = userinfo.sub(r"\1@", str(text))
    return _QUERY_PASSWORD.sub(lambda m: m.group(1) if m.group(0).endswith("&") else "", text)


def default_store_path(given: str | os.PathLike | None = None) -> str:
    """The store a command uses: `given` (its --store), else `HARNESS_STORE` if set (a file or a URL such as
    postgresql://...), else harness.db in the working folder. StoreError for a --store given empty (`--store ''`),
    which names no store."""
    if given is not None and not str(given).strip():
        raise StoreError(f"--store {str(given)!r}: expected the path of a store file or a postgresql:// URL, got an "
                         "empty one", source=str(given), field="--store")
    return str(given) if given is not None else os.environ.get("HARNESS_STORE") or DEFAULT_STORE


@dataclass(frozen=True)
class StoreLocation:
    """A store's location, parsed: its scheme, what the store opens, and the name messages give it."""

    #: the value as given (a URL keeps its password): never printed
    text: str = field(repr=False)
    #: `sqlite` for a path, else the URL's scheme in lower case
    scheme: str
    #: what the store opens: the path as given, or the URL with its scheme in lower case (password included)
    target: str = field(repr=False)
    #: what every message and hint calls the store: the path as given, or the URL without its password
    display: str
    #: whether it was given as a URL (`SCHEME://...`) rather than a path
    url: bool = False

    @property
    def identity(self) -> str:
        """The same string for every spelling of one store: a file's absolute path; a URL's display form with its
        host in lower case. For telling whether two locations are one store."""
        if not self.url:
            return str(Path(self.target).resolve())
        scheme, _, rest = self.display.partition("://")
        netloc, slash, path = rest.partition("/")
        user, at, host = netloc.rpartition("@")
        return f"{scheme}://{user}{at}{host.lower()}{slash}{path}"


def parse_location(given: StoreLocation | str | os.PathLike | None = None) -> StoreLocation:
    """The location of `given` (a --store value; None: HARNESS_STORE or harness.db), parsed once. StoreError for an
    empty one, and for an sqlite:// URL (an SQLite store is given by its path)."""
    if isinstance(given, StoreLocation):
        return given
    text = default_store_path(given)
    url = _URL.match(text)
    if url is None:
        return StoreLocation(text=text, scheme=PATH_SCHEME, target=text, display=text)
    scheme = url.group(1).lower()
    target = f"{scheme}://{url.group(2)}"
    if scheme == PATH_SCHEME:
        raise StoreError(f"--store {redact_urls(text)}: expected the path of an SQLite store file (harness.db), not an "
                         f"{PATH_SCHEME}:// URL", source=redact_urls(text), field="--store")
    return StoreLocation(text=text, scheme=scheme, target=target, display=redact_urls(target), url=True)
