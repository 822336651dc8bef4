"""Exceptions that carry a meaning for the runner and the CLI, and the words that help a user mend bad input."""

import difflib


class HarnessError(Exception):
    """Base class of every error harness raises on purpose."""


class InputError(HarnessError):
    """Bad input from the user: a scenario file, an override, a flag. The CLI exits 2."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        super().__init__(message)


class StoreError(InputError):
    """The results store cannot be used as it is: damaged, not a harness store, unwritable or full.

    Found when the store is opened (before anything is measured) it is bad input: the CLI exits 2.
    """


class StoreWriteError(StoreError):
    """A result could not be written to the store (a full disk, a damaged page) in mid-session.

    `kept_in` is the side file that holds every result of the session measured by this process,
    or None where no file could be written (then they were printed on standard error). `in_store`: the store
    reads them all back even so (only its file could not take them all: they are in its log as well).
    """

    def __init__(self, message: str, *, source: str | None = None, kept_in: str | None = None,
                 in_store: bool = False):
        self.kept_in, self.in_store = kept_in, in_store
        super().__init__(message, source=source, field="--store")


class Unsupported(HarnessError):
    """A combination a backend cannot run on a device or version; recorded as status `unsupported`."""


class OutOfMemory(HarnessError):
    """The run asked for more memory than the device (or host) had; recorded as status `oom`."""


class Diverged(HarnessError):
    """Training produced a non-finite loss; recorded as status `diverged`."""


class WrongResult(HarnessError):
    """A workload's correctness check failed; recorded as status `failed`."""


def first_line(text) -> str:
    """The first non-blank line of an error's text, at most 300 characters: the evidence a record keeps."""
    return next((line.strip() for line in str(text).splitlines() if line.strip()), str(text))[:300]


def line_naming(text, messages, case_sensitive: bool = True) -> str:
    """The first line of an error's text that names one of `messages`, else its first line; at most 300
    characters. TensorFlow's graph errors name their cause on a late line, after the Python stack."""
    fold = (lambda t: t) if case_sensitive else str.lower
    wanted = [fold(m) for m in messages]
    return next((line.strip() for line in str(text).splitlines() if any(m in fold(line) for m in wanted)),
                first_line(text))[:300]


#: oneDNN's words for a buffer it could not allocate (the CPU kernels of torch and TensorFlow): read as out of
#: memory only under --memory-limit (HARNESS_MEMORY_LIMIT_BYTES), where they are what a host limit produces.
ONEDNN_ALLOCATION = ("could not create a primitive", "could not allocate", "std::bad_alloc")


def allocation_failure(exc: BaseException, types: tuple = (), messages: tuple = ()) -> str | None:
    """Evidence that an exception, or one it was raised from, is an allocation failure; None if none is.

    Walks the chain (`__cause__`, then `__context__`: compilers re-raise the original as the cause) and
    stops at an Unsupported. A match is an instance of MemoryError, OutOfMemory or one of `types`, or
    a text containing one of `messages`; the evidence names it with the error's first line.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, Unsupported):
            return None
        if isinstance(current, (MemoryError, OutOfMemory) + tuple(types)):
            return f"{type(current).__name__}: {first_line(current)}"
        hit = next((m for m in messages if m in str(current)), None)
        if hit:
            return f"{type(current).__name__} naming {hit!r}: {first_line(current)}"
        current = current.__cause__ or current.__context__
    return None


def did_you_mean(name, choices) -> str:
    """'; did you mean `X`?' for the closest of `choices` to a mistyped `name` (difflib), else ''."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1)
    return f"; did you mean `{close[0]}`?" if close else ""
