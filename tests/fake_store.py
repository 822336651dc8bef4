"""A store plugin for the tests of the store seam: records and sessions in one JSON file, `jsonfile://PATH`.

Registered by scheme through the `harness.stores` entry-point group (tests/test_store_seam.py writes a
distribution's metadata for it), the way a third-party store would be: no SQL, nothing of harness's
SQL stores, only the Store protocol (harness.results.store.contract).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.errors import InputError
from harness.results.record import Result, utc_now
from harness.results.sessions import SessionSummary, StoredSession
from harness.results.store import (
    StoreLocation,
    parse_location,
    process_owner,
    read_rows,
)


class JsonFileStore:
    """Every record and session in one JSON file, rewritten whole on each change."""

    @classmethod
    def exists(cls, location: StoreLocation) -> bool:
        """Whether the file is there."""
        return Path(cls._file(location)).exists()

    @staticmethod
    def _file(location: StoreLocation) -> str:
        return location.target.split("://", 1)[1]

    def __init__(self, location: StoreLocation | str, *, readonly: bool = False):
        self.location = parse_location(location)
        self.path = self.location.display
        self.abandoned: list[str] = []
        self.unmerged: str | None = None
        self._file_path = Path(self._file(self.location))
        self._doc = {"records": [], "sessions": {}}
        if self._file_path.exists():
            self._doc = json.loads(self._file_path.read_text(encoding="utf-8"))
        elif not readonly:
            self._save()

    def _save(self) -> None:
        self._file_path.write_text(json.dumps(self._doc, default=str), encoding="utf-8")

    def add(self, result: Result) -> None:
        self._doc["records"] = [r for r in self._doc["records"] if r["run_id"] != result.run_id] + [result.to_dict()]
        self._save()

    def begin_session(self, session_id, plan, *, scenario_path, command, settings=None) -> None:
        self._doc["sessions"].setdefault(session_id, {
            "session_id": session_id, "started_at": utc_now(), "finished_at": None, "state": "running",
            "scenario_path": scenario_path, "command": command, "plan": [entry.to_dict() for entry in plan],
            "settings": settings.to_dict() if settings is not None else {}, "owner": process_owner()})
        self._save()

    def reopen_session(self, session_id: str, seen: dict | None = None) -> None:
        self._doc["sessions"][session_id].update(state="running", finished_at=None, owner=process_owner())
        self._save()

    def end_session(self, session_id: str, state: str) -> None:
        self._doc["sessions"][session_id].update(state=state, finished_at=utc_now())
        self._save()

    def import_file(self, path: str | os.PathLike) -> dict:
        records, sessions, unreadable = read_rows(path)
        have = {r["run_id"] for r in self._doc["records"]}
        new = [r for r in records if r["run_id"] not in have]
        self._doc["records"] += new
        new_sessions = [s for s in sessions if s["session_id"] not in self._doc["sessions"]]
        self._doc["sessions"].update({s["session_id"]: s for s in new_sessions})
        self._save()
        return {"records": len(records), "new": len(new), "sessions": len(sessions),
                "new_sessions": len(new_sessions), "unreadable": unreadable}

    def results(self, session_ids=None) -> list[Result]:
        return [Result.from_dict(r) for r in self.records(session_ids)]

    def records(self, session_ids=None) -> list[dict]:
        return [r for r in self._doc["records"] if not session_ids or r["session_id"] in session_ids]

    def find_sessions(self, session_id: str) -> list[str]:
        ids = list(self._doc["sessions"])
        return [session_id] if session_id in ids else sorted(i for i in ids if i.startswith(session_id or "\0"))

    def resolve_session(self, prefix: str) -> str:
        found = self.find_sessions(prefix)
        if len(found) != 1:
            raise InputError(f"store {self.path}: no single session matches {prefix!r}", field="--session")
        return found[0]

    def session(self, session_id: str) -> StoredSession | None:
        found = self.find_sessions(session_id)
        return StoredSession.from_dict(self._doc["sessions"][found[0]]) if len(found) == 1 else None

    def sessions(self) -> list[SessionSummary]:
        out = []
        for s in self._doc["sessions"].values():
            mine = self.records([s["session_id"]])
            out.append(SessionSummary(s["session_id"], s["started_at"], s["state"], s["scenario_path"],
                                      results=len(mine), ok=sum(r["status"] == "ok" for r in mine)))
        return out

    def ok_medians(self, run_key: str) -> list[float]:
        return [r["median"] for r in self._doc["records"] if r.get("run_key") == run_key and r["status"] == "ok"
                and r.get("median") is not None]

    def decided_results(self, session_id: str, status: str):
        return [(r.get("run_key"), r.get("replicate"), r.get("error") or "") for r in self.records([session_id])
                if r["status"] == status]

    def ok_results(self, session_id: str):
        return [(key, replicate) for key, replicate, _ in self.decided_results(session_id, "ok")]

    def side_files(self) -> list[Path]:
        return []

    def reopen(self, *, readonly: bool = True) -> JsonFileStore:
        return JsonFileStore(self.location, readonly=readonly)

    def close(self) -> None:
        pass

    def __enter__(self) -> JsonFileStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class NotAStore:
    """A class registered as a store that is not one: no `exists`."""
