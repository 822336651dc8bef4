"""What `harness results --import` takes in: a side file, a JSON array of records, or a store, damaged or not.

Each is read and checked whole before anything is written; anything that is not one of these is an
InputError naming the file and field. `read_importable` gives the records as `Result` objects;
`read_rows` gives them as the rows the file holds, which an import copies into a store unchanged (a
record an earlier version wrote keeps its own fields, none added).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from harness.errors import InputError
from harness.results.record import RecordError, Result
from harness.results.sessions import SessionRow
from harness.results.store.salvage import salvage
from harness.results.store.schema import SQLITE_HEADER
from harness.results.store.sidefiles import read_side_file


def _bad(path, field: str, expected: str) -> InputError:
    return InputError(f"{path}: field `{field}`: expected {expected}; nothing was taken in", source=str(path), field=field)


def _check_record(path, i: int, record) -> dict:
    """records[i], if it is a result record: an object with a run_id, a session_id, a schema_version."""
    if not isinstance(record, dict):
        raise _bad(path, f"records[{i}]", f"a result record (a JSON object), got {type(record).__name__}")
    for key in ("run_id", "session_id"):
        value = record.get(key)
        if not isinstance(value, str) or not value:
            raise _bad(path, f"records[{i}].{key}", f"a non-empty string, got {value!r}"[:200])
    version = record.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _bad(path, f"records[{i}].schema_version", f"an integer, got {version!r}"[:200])
    return record


#: What an import says a session's column should be, where pydantic's own words would be less clear.
_SESSION_EXPECTED = {"session_id": "a non-empty string", "plan": "a list of planned runs"}


def _check_session(path, i: int, session) -> dict:
    """sessions[i], if it is a session row (SessionRow); kept as the file holds it, which an import copies."""
    if not isinstance(session, dict):
        raise _bad(path, f"sessions[{i}]", f"a session (a JSON object), got {type(session).__name__}")
    try:
        SessionRow.model_validate(session)
    except ValidationError as exc:
        error = exc.errors()[0]
        column = str(error["loc"][0])
        raise _bad(path, f"sessions[{i}].{column}", _SESSION_EXPECTED.get(column, error["msg"].lower())) from None
    return session


def _readable_session(path, i: int, session: dict) -> bool:
    try:
        _check_session(path, i, session)
    except InputError:
        return False
    return True


def _from_store(p: Path) -> tuple[list[dict], list[dict], int]:
    """Every record and session a store file still holds; records that cannot be read are counted, sessions that
    cannot (a column of the wrong type) left out."""
    texts, salvaged = salvage(p)
    sessions = [s for i, s in enumerate(salvaged) if _readable_session(p, i, s)]
    records, unreadable = [], 0
    for text in texts:
        try:
            records.append(_check_record(p, len(records), json.loads(text)))
        except (ValueError, TypeError, InputError):
            unreadable += 1
    return records, sessions, unreadable


def _from_json(path, doc) -> tuple[list[dict], list[dict], int]:
    """The records (and sessions) of a JSON array of records or a side file."""
    if isinstance(doc, list):
        return [_check_record(path, i, r) for i, r in enumerate(doc)], [], 0
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise _bad(path, "records", "a side file (a JSON object with a `records` list) or a JSON array of records")
    sessions = doc.get("sessions") or []
    if not isinstance(sessions, list):
        raise _bad(path, "sessions", "a list of sessions")
    return ([_check_record(path, i, r) for i, r in enumerate(doc["records"])],
            [_check_session(path, i, s) for i, s in enumerate(sessions)], 0)


def read_importable(path: str | os.PathLike) -> tuple[list[Result], list[dict], int]:
    """(records, sessions, rows that could not be read) of a side file, a JSON array of records or a
    store (read row by row from both ends, so the rows beside a damaged page are still read).
    InputError, naming the file and field, for anything else."""
    rows, sessions, unreadable = read_rows(path)
    records = []
    for i, row in enumerate(rows):
        try:
            records.append(Result.from_dict(row))
        except RecordError as exc:
            raise InputError(f"{path}: records[{i}]: {exc}; nothing was taken in", source=str(path),
                             field=f"records[{i}]") from None
    return records, sessions, unreadable


def read_rows(path: str | os.PathLike) -> tuple[list[dict], list[dict], int]:
    """read_importable's records as the checked rows the file holds."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path}: no such file (expected a side file, a JSON array of records or a store)",
                         source=str(path), field="--import")
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc}", source=str(path), field="--import") from None
    if head == SQLITE_HEADER:
        return _from_store(p)
    try:
        doc = read_side_file(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not JSON ({exc}); expected a side file, a JSON array of records or a store",
                         source=str(path), field="--import") from None
    return _from_json(path, doc)
