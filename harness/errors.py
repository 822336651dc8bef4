"""Exceptions that carry a meaning for the runner and the CLI."""


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
    or None where no file could be written (then they were printed on standard error).
    """

    def __init__(self, message: str, *, source: str | None = None, kept_in: str | None = None):
        self.kept_in = kept_in
        super().__init__(message, source=source, field="--store")


class Unsupported(HarnessError):
    """A combination a backend cannot run on a device or version; recorded as status `unsupported`."""


class OutOfMemory(HarnessError):
    """The run asked for more memory than the device (or host) had; recorded as status `oom`."""


class Diverged(HarnessError):
    """Training produced a non-finite loss; recorded as status `diverged`."""


class WrongResult(HarnessError):
    """A workload's correctness check failed; recorded as status `failed`."""
