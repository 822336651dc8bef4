"""Resuming a stored session: which of its planned runs (or capacity searches) still have no ok result, and
the rest of its plan, run with the settings it began with."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from harness.errors import InputError
from harness.results.sessions import PlanEntry, StoredSession
from harness.results.store import (
    Store,
    open_store,
    owner_alive,
    parse_location,
    read_importable,
    store_exists,
)
from harness.scenario.load import DEFAULT_MAX_RUNS
from harness.session.capacity import capacity_key
from harness.session.plan import new_id
from harness.session.request import PreparedSession, Resumed, SessionRequest
from harness.session.rounds import AdaptiveRounds
from harness.session.unsupported import answer_holds


def remaining_runs(entries: list[PlanEntry], ok: list[tuple[str, int | None]]) -> list[bool]:
    """For each planned run (an entry of a stored plan), whether it still has to run.

    Runs are counted, not configurations: a configuration planned 4 times (a repeated sweep value,
    `measure.processes` replicates) with 1 ok result still has 3 to run. An ok result counts first
    against the entry of its own replicate, then against the first entries of its run_key left.
    """
    exact = Counter((key, rep) for key, rep in ok if rep is not None)
    loose = Counter(key for key, _ in ok)
    done = [False] * len(entries)
    for i, entry in enumerate(entries):
        key, rep = entry.spec.run_key, entry.spec.replicate
        if exact[(key, rep)] > 0:
            exact[(key, rep)] -= 1
            loose[key] -= 1
            done[i] = True
    for i, entry in enumerate(entries):
        if not done[i] and loose[entry.spec.run_key] > 0:
            loose[entry.spec.run_key] -= 1
            done[i] = True
    return [not d for d in done]


def capacity_searches_left(entries: list[PlanEntry], ok: list[tuple[str, int | None]]) -> tuple[list[PlanEntry], int]:
    """A capacity session's plan entries still to search (one per configuration with no ok capacity record:
    its probes are redone) and how many searches it planned."""
    keys = [capacity_key(entry.spec) for entry in entries]
    left, seen = [], {key for key, _ in ok}
    for entry, key in zip(entries, keys):
        if key not in seen:
            seen.add(key)
            left.append(entry)
    return left, len(set(keys))


def work_left(session: StoredSession, ok: list[tuple[str, int | None]]) -> tuple[int, int, str]:
    """(left, planned, what) of a stored session's plan: capacity searches for a capacity session, else runs
    (ValueError for a plan that holds no planned runs)."""
    entries = session.entries()
    if session.capacity_mode:
        left, total = capacity_searches_left(entries, ok)
        return len(left), total, "capacity search(es)"
    return sum(remaining_runs(entries, ok)), len(entries), "run(s)"


def settled_results(reader: Store, session_id: str) -> list[tuple[str, int | None]]:
    """(run_key, replicate) of the session's stored results that need no second run: every `ok` one, and every
    `unsupported` one whose reason holds wherever it is resumed (harness.session.unsupported.answer_holds). An
    unsupported configuration is answered once, not again at every resume."""
    answered = [(key, rep) for key, rep, error in reader.decided_results(session_id, "unsupported")
                if answer_holds(error)]
    return reader.ok_results(session_id) + answered


def _ok_kept_beside(reader: Store, session_id: str) -> list[tuple[str, int | None]]:
    """(run_key, replicate) of the session's ok results kept in side files, beside the store that could not take
    them, or in the journal of a session whose process ended before it (they count as done, each result once
    however many files hold it; they are taken into the store once it is open for writing)."""
    seen = {r.run_id for r in reader.results([session_id])}
    ok = []
    for side in reader.side_files():
        kept, _, _ = read_importable(side)
        for r in kept:
            if r.session_id == session_id and r.status == "ok" and r.run_id not in seen:
                seen.add(r.run_id)
                ok.append((r.run_key, r.replicate if isinstance(r.replicate, int) else None))
    return ok


def find_session(request: SessionRequest) -> tuple[str, StoredSession, list[tuple[str, int | None]]]:
    """(store path, the stored session --resume names, its ok results as (run_key, replicate)); InputError for a
    missing store, an id that names no session or several, or a session its own process is still running."""
    resume, location = request.resume, parse_location(request.store_path)
    if not resume.strip():
        raise InputError("--resume '': expected a session id (or a unique prefix of one)", field="--resume")
    if not store_exists(location):
        raise InputError(f"--resume {resume}: store {location.display}: no such file; give the --store the session "
                         "ran with", source=location.display, field="--store")
    with open_store(location, readonly=True) as reader:  # nothing is written until the session is known
        matches = reader.find_sessions(resume)
        if len(matches) != 1:
            found = f"{len(matches)} sessions match ({', '.join(matches[:10])})" if matches else "no session matches"
            known = ", ".join(s.session_id for s in reader.sessions()[-10:]) or "none"
            raise InputError(f"--resume {resume}: {found} in store {reader.path}; expected one stored session id "
                             f"(or a unique prefix of one; sessions: {known})", source=reader.path, field="--resume")
        session = reader.session(matches[0])
        ok = settled_results(reader, matches[0]) + _ok_kept_beside(reader, matches[0])
    if session.state == "running" and owner_alive(session.owner):
        owner = session.owner
        raise InputError(f"--resume {resume}: session {session.session_id} is still running (pid "
                         f"{owner.pid} on {owner.host}); resuming it now would run its runs twice. Wait "
                         "for it, or stop it first", field="--resume")
    return location.text, session, ok


def _memory_limit(request: SessionRequest, session: StoredSession, limit_bytes: int | None) -> int | None:
    """The memory limit the session ran with (InputError for a different --memory-limit); `limit_bytes` where
    the session stored none."""
    settings = session.settings
    if "memory_limit_bytes" not in settings:
        return limit_bytes
    stored = settings.memory_limit_bytes
    if limit_bytes is not None and limit_bytes != stored:
        raise InputError(
            f"--memory-limit {request.memory_limit}: session {session.session_id} ran "
            f"{'with --memory-limit ' + str(settings.memory_limit) if stored else 'without --memory-limit'}, "
            "and its other runs are resumed alike (leave the option out, or start a new session)",
            field="--memory-limit")
    return stored


def _check_alike(request: SessionRequest, session: StoredSession, entries: list[PlanEntry]) -> None:
    """InputError for a --timeout, --find-max-batch or --capacity-* that differs from what the session ran with."""
    settings, session_id, capacity_mode = session.settings, session.session_id, session.capacity_mode
    timeout = request.timeout
    if timeout is not None and "timeout_s" in settings and timeout != settings.timeout_s:
        raise InputError(f"--timeout {timeout:g}: session {session_id} ran with "
                         f"{'--timeout %g' % settings.timeout_s if settings.timeout_s else 'the timeout of its file'}"
                         ", and its other runs are resumed alike (leave the option out)", field="--timeout")
    if request.find_max_batch and not capacity_mode:
        raise InputError(f"--find-max-batch: session {session_id} was not a capacity search; resume it without "
                         "the option", field="--find-max-batch")
    for key, value in request.capacity.items():  # a search resumes with the settings it began with
        flag = f"--capacity-{key}"
        if not capacity_mode:
            raise InputError(f"{flag} {value}: session {session_id} was not a capacity search; resume it without "
                             "the option", field=flag)
        ran = sorted({getattr(entry.capacity, key) for entry in entries
                      if entry.capacity is not None and getattr(entry.capacity, key)})
        if ran and ran != [value]:
            raise InputError(f"{flag} {value}: session {session_id} searched with {key} "
                             f"{', '.join(map(str, ran))}, and its other searches are resumed alike (leave the "
                             "option out, or start a new session)", field=flag)


def _seen(session: StoredSession) -> dict:
    """The session's owner and state as read when its plan was made, as the store holds them: a claim made since
    shows."""
    return {"owner": session.owner.to_dict() if session.owner is not None else None, "state": session.state}


def prepare_resume(request: SessionRequest, limit_bytes: int | None) -> PreparedSession:
    """The rest of the stored session `request.resume` names, with the settings it began with (InputError for
    a request that would change them); nothing is written."""
    shaping = [name for name, given in (("--set", request.overrides), ("--backend", request.backends),
                                        ("--device", request.devices), ("--max-runs", request.max_runs),
                                        ("--document", request.documents)) if given]
    if shaping:
        raise InputError(f"--resume {request.resume}: a resumed session runs the rest of its own plan; "
                         f"{', '.join(shaping)} cannot change it (start a new session with SCENARIO_FILE for that)",
                         field="--resume")
    path, session, ok = find_session(request)
    try:
        entries = session.entries()
    except ValueError as exc:
        raise InputError(f"--resume {request.resume}: {exc}; it cannot be resumed", field="--resume") from None
    settings = session.settings
    limit_bytes = _memory_limit(request, session, limit_bytes)
    capacity_mode = session.capacity_mode
    _check_alike(request, session, entries)
    if capacity_mode:  # a search is done when its capacity record is ok; its probes are redone
        left, total = capacity_searches_left(entries, ok)
        groups = [(entry.capacity, [replace(entry.spec, run_id=new_id())]) for entry in left]
        plan = [spec for _, specs in groups for spec in specs]
        resumed = Resumed(len(plan), total, "capacity search(es)", seen=_seen(session))
    else:
        groups = []
        todo = remaining_runs(entries, ok)
        plan = [replace(entry.spec, run_id=new_id()) for entry, left in zip(entries, todo) if left]
        if request.timeout is not None and "timeout_s" not in settings:  # a session stored before settings were
            plan = [spec.with_measure(timeout_s=float(request.timeout)) for spec in plan]
        resumed = Resumed(len(plan), len(entries), "run(s)", seen=_seen(session))
    rounds = None if capacity_mode else AdaptiveRounds.of(
        [entry.spec for entry in entries], planned=len(entries), limit=settings.max_runs or DEFAULT_MAX_RUNS)
    return PreparedSession(request=request, session_id=session.session_id, plan=plan, groups=groups,
                           capacity_mode=capacity_mode, store_path=path, memory_limit_bytes=limit_bytes,
                           resumed=resumed, rounds=rounds)
