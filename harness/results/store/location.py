"""Where a store is: a `--store` value parsed once into its scheme, what the store opens, and how it is named.

A value with `SCHEME://` in front is a URL, its scheme compared in lower case (`POSTGRESQL://` is
`postgresql://`); anything else is the path of an SQLite file (scheme `sqlite`). The registry
(`registry`) picks the store class by the scheme. A URL's password stays in `text` and `target`, which
only the store reads to connect; every message names the store by `display`, which has none, and a
driver's message passes through `scrub`, which takes out the password in every spelling it was given.

What is neither a URL nor a path is refused (StoreError, exit 2, before anything is written), since each
would be taken for a path and not be one: SQLite's `:memory:` (results kept in RAM, gone at exit), a
`file:` URI (SQLite opens whatever file it names, another program's database included), a libpq keyword
string (`host=... password=...`), `SCHEME:` with no `//`; and in a URL a raw `@` or `%` not followed by
two hex digits in its user name or password (libpq would cut the URL there and quote the rest). A file
whose name looks like one of these is given as `./NAME`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from harness.errors import StoreError
from harness.machine.variables import variables

#: The store a command uses when neither --store nor HARNESS_STORE names one.
DEFAULT_STORE = "harness.db"
#: The scheme of a location given as a plain path: an SQLite file.
PATH_SCHEME = "sqlite"
#: Any URL scheme (RFC 3986): a letter, then letters, digits, `+`, `-` or `.`.
ANY_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*"

_URL = re.compile(rf"^\s*({ANY_SCHEME})://(.*)$", re.DOTALL)
_QUERY_PASSWORD = re.compile(r"([?&])password=[^&\s]*&?")
#: `password=VALUE` in a libpq keyword string (`host=h password='a b'`), quoted or not.
_KEYWORD_PASSWORD = re.compile(r"(?<![?&\w])(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s&]*)", re.IGNORECASE)
#: What looks like a URI or a keyword string rather than a file: `NAME:` (`file:`, `postgresql:`; no `//`),
#: SQLite's `:memory:`, or `key=value`.
_NOT_A_PATH = (
    (re.compile(r"^:memory:$", re.IGNORECASE),
     "SQLite's in-memory database, which keeps nothing once the command ends"),
    (re.compile(r"^file:", re.IGNORECASE),
     "an SQLite URI, which may name any database file, another program's included"),
    (re.compile(r"(^|\s)[A-Za-z_]+\s*=", re.IGNORECASE),
     "a keyword string (host=... dbname=...), not a location: give a PostgreSQL database as postgresql://USER@HOST/DB"),
    (re.compile(rf"^{ANY_SCHEME}:(?!//)", re.IGNORECASE),
     "a URI without `//`, not a location: a URL is SCHEME://..."),
)
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def redact_urls(text: str, schemes: str = ANY_SCHEME) -> str:
    """Text with the password of every URL of `schemes` (a pattern; any scheme by default, compared in any case)
    taken out, and every `?password=` or `&password=` parameter (a command line, a message, a URL)."""
    userinfo = re.compile(rf"((?:{schemes})://[^:/@\s]*):[^@\s]*@", re.IGNORECASE)
    text = userinfo.sub(r"\1@", str(text))
    text = _KEYWORD_PASSWORD.sub(r"\1***", text)
    return _QUERY_PASSWORD.sub(lambda m: m.group(1) if m.group(0).endswith("&") else "", text)


def default_store_path(given: str | os.PathLike | None = None) -> str:
    """The store a command uses: `given` (its --store), else `HARNESS_STORE` if set (a file or a URL such as
    postgresql://...), else harness.db in the working folder. StoreError for a --store given empty (`--store ''`),
    which names no store."""
    if given is not None and not str(given).strip():
        raise StoreError(f"--store {str(given)!r}: expected the path of a store file or a postgresql:// URL, got an "
                         "empty one", source=str(given), field="--store")
    return str(given) if given is not None else variables().store or DEFAULT_STORE


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
    #: the URL's password as written and percent-decoded (and a `?password=`'s): never printed
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def scrub(self, text: str) -> str:
        """Text (a driver's message, which may quote the URL or a piece of it) without this location's password."""
        text = redact_urls(str(text))
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

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
        _refuse_non_path(text)
        return StoreLocation(text=text, scheme=PATH_SCHEME, target=text, display=text)
    scheme = url.group(1).lower()
    target = f"{scheme}://{url.group(2)}"
    if scheme == PATH_SCHEME:
        raise StoreError(f"--store {redact_urls(text)}: expected the path of an SQLite store file (harness.db), not an "
                         f"{PATH_SCHEME}:// URL", source=redact_urls(text), field="--store")
    user, secrets = _userinfo(scheme, url.group(2))
    netloc_rest = re.split(r"(?=[/?#])", url.group(2), maxsplit=1)
    host = netloc_rest[0].rpartition("@")[2]
    display = redact_urls(f"{scheme}://{user}{'@' if user or '@' in netloc_rest[0] else ''}{host}"
                          f"{netloc_rest[1] if len(netloc_rest) > 1 else ''}")
    query = re.findall(r"[?&]password=([^&#\s]*)", url.group(2), re.IGNORECASE)
    secrets += tuple(s for q in query for s in (q, unquote(q)) if s)
    # everything from the first `:` of the user part to the last `@`: the password, however a `/` in it cut the URL
    loose = re.match(r"[^:/@]*:(.+)@", url.group(2), re.DOTALL)
    secrets += (loose.group(1),) if loose else ()
    return StoreLocation(text=text, scheme=scheme, target=target, display=display, url=True, secrets=secrets)


def _refuse_non_path(text: str) -> None:
    """StoreError for a value that would be taken for a path and is not one (`:memory:`, `file:`, `key=value`)."""
    for pattern, what in _NOT_A_PATH:
        if pattern.search(text):
            # `SCHEME:user:password@...`: its parts cannot be told apart, so only the scheme is shown
            shown = redact_urls(text) if pattern is not _NOT_A_PATH[-1][0] else text.partition(":")[0] + ":..."
            raise StoreError(f"--store {shown}: expected the path of an SQLite store file or a URL such as "
                             f"postgresql://USER@HOST/DB; this is {what} (a file whose name looks like this: "
                             "give it as ./NAME)",
                             source=shown, field="--store")


def _userinfo(scheme: str, rest: str) -> tuple[str, tuple[str, ...]]:
    """A URL's user name (shown) and its password as written and percent-decoded (secrets). StoreError, without the
    password, for a raw `@` or a `%` not followed by two hex digits in either: libpq would cut the URL there and quote
    the piece, password included."""
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    userinfo, at, _host = netloc.rpartition("@")
    if not at:
        return "", ()
    user, colon, password = userinfo.partition(":")
    host = netloc.rpartition("@")[2]
    shown = f"{scheme}://{user.partition('@')[0]}@{host}"
    if "@" in userinfo:
        raise StoreError(f"--store {shown}/...: the user name or password holds a raw '@'; write it as %40",
                         source=shown, field="--store")
    if _BAD_ESCAPE.search(userinfo):
        raise StoreError(f"--store {shown}/...: the user name or password holds a '%' not followed by two hex digits; "
                         "write a '%' as %25", source=shown, field="--store")
    return user, tuple(s for s in (password, unquote(password)) if s) if colon else ()
