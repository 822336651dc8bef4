"""Fields a session lays over a `Result`: those a worker wrote to its result file, and the notes the runner
and the capacity search keep beside the record's own fields (log_tail, probe_of, oom_evidence ...)."""

from __future__ import annotations

from typing import Any

from harness.results.record import FIELD_NAMES, Result


def with_fields(result: Result, fields: dict) -> Result:
    """A copy of `result` with `fields` laid over it; a key that is no Result field is kept in its extra."""
    return Result.from_dict({**result.to_dict(), **fields})


def field_value(result: Result, key: str, default: Any = None) -> Any:
    """A record's value of `key`, whether a Result field or a note kept in its extra."""
    if key in FIELD_NAMES:
        return getattr(result, key)
    return result.extra.get(key, default)


def set_field(result: Result, key: str, value: Any) -> None:
    """Set `key` on a record in place: a Result field, or a note kept in its extra."""
    if key in FIELD_NAMES:
        setattr(result, key, value)
    else:
        result.extra[key] = value
