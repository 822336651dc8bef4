"""Standard output that a closed pipe cannot fail: `harness ... | head` exits with the command's own code.

When the reader of a pipe goes away (`| head -1` has its line), the next write raises BrokenPipeError;
click would turn that into exit 1, the code of a failed run or a regression. The command's answer does
not depend on anyone reading the rest of it, so after the pipe closes its output is dropped and the
command finishes with the code its work gives: 0 where nothing failed, 1 where a run failed or
`--fail-if-slower` found a regression.

Standard output that cannot take what is written (`> /dev/full`, a full disk, a quota) is another matter: the
output asked for is incomplete. The rest is dropped likewise, the error is kept (`write_error`), and the
command ends with one line saying so and exit 1 (harness.cli), not a traceback.
"""

from __future__ import annotations

import errno
import io
import os

#: Write errors that mean the output cannot be kept (the disk or the quota is full, the file is too large).
FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class ClosablePipe(io.TextIOBase):
    """A text stream over `stream` that, once its reader has gone, drops what is written."""

    def __init__(self, stream):
        super().__init__()
        self._stream = stream
        self.closed_by_reader = False
        #: the error that stopped the output where it could not be written (a full disk), else None
        self.write_error: OSError | None = None

    def _write_through(self, action):
        if self.closed_by_reader:
            return None
        try:
            return action()
        except BrokenPipeError:
            self._drop()
            return None
        except OSError as exc:
            if exc.errno not in FULL:
                raise
            self.write_error = self.write_error or exc
            self._drop()
            return None

    def _drop(self) -> None:
        # the file descriptor too: the interpreter's last flush at exit must not meet the closed pipe
        self.closed_by_reader = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        except (OSError, ValueError):
            pass
        finally:
            os.close(devnull)

    def write(self, text: str) -> int:
        """Write `text` through, or drop it once the reader has gone; always reports it whole."""
        self._write_through(lambda: self._stream.write(text))
        return len(text)

    def flush(self) -> None:
        """Flush through; a reader gone by now makes the rest of the output dropped."""
        self._write_through(self._stream.flush)

    def isatty(self) -> bool:
        """Whether the stream under it is a terminal (tables fit its width then)."""
        return self._stream.isatty()

    def fileno(self) -> int:
        """The file descriptor of the stream under it."""
        return self._stream.fileno()

    @property
    def encoding(self):
        """The encoding of the stream under it."""
        return self._stream.encoding

    @property
    def buffer(self):
        """The binary buffer of the stream under it (click writes bytes there)."""
        return _ClosableBuffer(self._stream.buffer, self)


class _ClosableBuffer(io.RawIOBase):
    """The binary side of a ClosablePipe: its writes drop likewise once the reader has gone."""

    def __init__(self, buffer, pipe: ClosablePipe):
        super().__init__()
        self._buffer = buffer
        self._pipe = pipe

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._pipe._write_through(lambda: self._buffer.write(data))
        return len(data)

    def flush(self) -> None:
        self._pipe._write_through(self._buffer.flush)


def guard_stdout(stream) -> ClosablePipe:
    """`stream` (sys.stdout) wrapped so that a closed pipe drops output instead of failing the command."""
    return stream if isinstance(stream, ClosablePipe) else ClosablePipe(stream)
