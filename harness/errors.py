"""Exceptions that carry a meaning for the runner and the CLI."""


class HarnessError(Exception):
    """Base class of every error harness raises on purpose."""


class InputError(HarnessError):
    """Bad input from the user: a scenario file, an override, a flag. The CLI exits 2."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        super().__init__(message)


class Unsupported(HarnessError):
    """A combination a backend cannot run on a device or version; recorded as status `unsupported`."""


class OutOfMemory(HarnessError):
    """The run asked for more memory than the device (or host) had; recorded as status `oom`."""


class Diverged(HarnessError):
    """Training produced a non-finite loss; recorded as status `diverged`."""


class WrongResult(HarnessError):
    """A workload's correctness check failed; recorded as status `failed`."""
