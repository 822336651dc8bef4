"""`harness run`: expand a scenario into runs, execute each in its own process, store every result."""

from __future__ import annotations

import contextlib
import math
import shlex
import signal
import sys

import click

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 10**6, "mb": 10**6, "mib": 1024**2,
          "g": 10**9, "gb": 10**9, "gib": 1024**3, "t": 10**12, "tb": 10**12, "tib": 1024**4}

#: The smallest --memory-limit accepted. A worker imports its framework under the limit before it
#: measures anything: measured on the 2-core CPU machine (2026-11-30, RLIMIT_DATA), a worker running
#: a 64x64 gemm needs about 850 MiB with torch 2.14 (importing torch alone: 783 MiB) and about
#: 480 MiB with TensorFlow 2.21; below that every worker dies while importing. 1 GiB leaves room.
MIN_MEMORY_LIMIT = 1024**3
MIN_MEMORY_LIMIT_TEXT = "1GiB"
#: The largest limit the OS can be given (setrlimit takes a C long).
MAX_MEMORY_LIMIT = 2**63 - 1
#: The longest --timeout accepted (measure.timeout_s allows the same).
MAX_TIMEOUT_S = 7 * 86_400


def parse_size(text: str) -> int:
    """Bytes from a size such as 512MiB, 4GiB, 2G or 1000000000; InputError (before anything is
    written) for anything that is not a size, below MIN_MEMORY_LIMIT, or beyond what the OS can set."""
    import re
    from fractions import Fraction

    from harness.errors import InputError

    expected = f"expected a size such as 4GiB, 1.5GiB or 2000MB, at least {MIN_MEMORY_LIMIT_TEXT}"
    shown = repr(text) if len(str(text)) <= 40 else repr(str(text)[:37] + "...")
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text or "") if len(text or "") <= 64 else None
    if not match or match.group(2).lower() not in _UNITS:
        raise InputError(f"--memory-limit {shown}: {expected}", field="--memory-limit")
    size = int(Fraction(match.group(1)) * _UNITS[match.group(2).lower()])
    if size > MAX_MEMORY_LIMIT:
        raise InputError(f"--memory-limit {shown}: more than the largest limit the OS can set ({MAX_MEMORY_LIMIT} bytes, "
                         f"8 EiB); {expected}", field="--memory-limit")
    if size < MIN_MEMORY_LIMIT:
        raise InputError(
            f"--memory-limit {shown}: {size} bytes is below {MIN_MEMORY_LIMIT_TEXT}, the smallest limit a worker can "
            "work under (it imports its framework first: torch 2.14 needs about 850 MiB, TensorFlow 2.21 about 480 MiB); "
            f"{expected}", field="--memory-limit")
    return size


#: Free space below which the store's file system is called nearly full when a session starts.
LOW_DISK_BYTES = 64 * 2**20


def _free_bytes(path: str) -> int | None:
    import shutil
    from pathlib import Path

    try:
        return shutil.disk_usage(Path(path).resolve().parent).free
    except OSError:
        return None


def _check_timeout(ctx, param, value):
    """--timeout: finite, more than 0, at most 7 days (InputError, exit 2, otherwise)."""
    from harness.errors import InputError

    if value is None:
        return None
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT_S:
        raise InputError(f"--timeout {value!r}: expected a finite number of seconds, more than 0 and at most "
                         f"{MAX_TIMEOUT_S} (7 days)", field="--timeout")
    return value


def _progress_start(i: int, n: int, spec) -> None:
    click.echo(f"[{i}/{n}] {spec.label()} ...", err=True)


def _progress_result(i: int, n: int, record: dict) -> None:
    status = record.get("status")
    figure = ""
    if record.get("median") is not None:
        figure = f" {record['median']:.4g} {record.get('unit') or ''}"
    elif record.get("error"):
        figure = f" ({str(record['error']).splitlines()[0][:150]})"
    click.echo(f"[{i}/{n}] {status}{figure} in {record.get('duration_s') or 0:.1f} s", err=True)


def remaining_runs(entries: list[dict], ok: list[tuple[str, int | None]]) -> list[bool]:
    """For each planned run (an entry of a stored plan), whether it still has to run.

    Runs are counted, not configurations: a configuration planned 4 times (a repeated sweep value,
    `measure.processes` replicates) with 1 ok result still has 3 to run. An ok result counts first
    against the entry of its own replicate, then against the first entries of its run_key left.
    """
    from collections import Counter

    exact = Counter((key, rep) for key, rep in ok if rep is not None)
    loose = Counter(key for key, _ in ok)
    done = [False] * len(entries)
    for i, entry in enumerate(entries):
        rep = entry.get("replicate")
        if isinstance(rep, int) and exact[(entry.get("run_key"), rep)] > 0:
            exact[(entry.get("run_key"), rep)] -= 1
            loose[entry.get("run_key")] -= 1
            done[i] = True
    for i, entry in enumerate(entries):
        if not done[i] and loose[entry.get("run_key")] > 0:
            loose[entry.get("run_key")] -= 1
            done[i] = True
    return [not d for d in done]


@contextlib.contextmanager
def _signals_ignored():
    """SIGINT/SIGTERM ignored while a session is being closed (main thread only)."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, signal.SIG_IGN)
        except ValueError:
            pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _mark(store, session_id: str, state: str) -> bool:
    """Mark a session's end state; a store that cannot take it is reported, not raised."""
    from harness.errors import StoreError

    try:
        store.end_session(session_id, state)
        return True
    except StoreError as exc:
        click.echo(f"warning: {exc} (the next harness run into this store marks it)", err=True)
        return False


@click.command("run")
@click.argument("scenario_file", required=False)
@click.option("--backend", "backends", multiple=True, metavar="NAME",
              help="Run only these backends: torch/pytorch, tensorflow/tf or any installed plugin "
                   "(repeatable; 'all' = every backend in the file).")
@click.option("--device", "devices", multiple=True, metavar="DEV",
              help="auto, cpu, cuda:N or gpu:N (repeatable); replaces the file's devices.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a parameter (a [list] sweeps it), measure.FIELD, seed or name.")
@click.option("--store", "store_path", default=None, help="SQLite store (default harness.db or $HARNESS_STORE).")
@click.option("--timeout", type=float, default=None, callback=_check_timeout,
              help="Seconds one run may take before it is stopped (default measure.timeout_s).")
@click.option("--max-runs", type=click.IntRange(min=1), default=None, help="Largest plan accepted (default 1000).")
@click.option("--dry-run", is_flag=True, help="Print the plan and exit.")
@click.option("--resume", "resume", default=None, metavar="SESSION",
              help="Run the runs of a stored session that have no ok result, with the session's own settings.")
@click.option("--find-max-batch", is_flag=True, help="Search the largest batch_size that fits, per configuration.")
@click.option("--memory-limit", default=None, metavar="SIZE",
              help=f"Cap each worker's host memory (e.g. 4GiB; at least {MIN_MEMORY_LIMIT_TEXT}): emulate a smaller "
                   "machine on the CPU.")
@click.option("--quiet", "-q", is_flag=True, help="No per-run progress lines.")
def command(scenario_file, backends, devices, overrides, store_path, timeout, max_runs, dry_run, resume,
            find_max_batch, memory_limit, quiet) -> None:
    """Run SCENARIO_FILE (a path, or the name of a bundled scenario such as `quickstart`)."""
    from harness.runner import Interrupted, trap_signals

    with trap_signals():  # from the start: Ctrl-C at any moment ends cleanly, with the session marked
        try:
            _command(scenario_file, backends, devices, overrides, store_path, timeout, max_runs, dry_run, resume,
                     find_max_batch, memory_limit, quiet)
        except (Interrupted, KeyboardInterrupt) as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
            click.echo(f"interrupted by {signal.Signals(signum).name} before any run finished: nothing was run", err=True)
            sys.exit(128 + signum)


def _command(scenario_file, backends, devices, overrides, store_path, timeout, max_runs, dry_run, resume,
             find_max_batch, memory_limit, quiet) -> None:
    from pathlib import Path

    from harness.backend import resolve_backend_name
    from harness.bundled import resolve_scenario_path
    from harness.devices import normalize_device
    from harness.errors import InputError
    from harness.plan import RunSpec, build_plan, new_id
    from harness.scenario import DEFAULT_MAX_RUNS, load_scenarios
    from harness.store import Store, default_store_path, owner_alive, read_importable
    from harness.workloads import WORKLOADS

    # every flag is checked before anything is read, planned or written
    limit_bytes = parse_size(memory_limit) if memory_limit is not None else None
    if resume is not None and scenario_file:
        raise InputError("give either SCENARIO_FILE or --resume SESSION, not both", field="--resume")
    if resume is None and not scenario_file:
        raise InputError("missing SCENARIO_FILE (or --resume SESSION)", field="SCENARIO_FILE")

    capacity_mode = False
    if resume is not None:
        shaping = [name for name, given in (("--set", overrides), ("--backend", backends), ("--device", devices),
                                            ("--max-runs", max_runs)) if given]
        if shaping:
            raise InputError(f"--resume {resume}: a resumed session runs the rest of its own plan; {', '.join(shaping)} "
                             "cannot change it (start a new session with SCENARIO_FILE for that)", field="--resume")
        path = str(store_path or default_store_path())
        if not resume.strip():
            raise InputError("--resume '': expected a session id (or a unique prefix of one)", field="--resume")
        if not Path(path).exists():
            raise InputError(f"--resume {resume}: store {path}: no such file; give the --store the session ran with",
                             source=path, field="--store")
        with Store(path, readonly=True) as reader:  # nothing is written until the session is known
            matches = reader.find_sessions(resume)
            if len(matches) != 1:
                found = f"{len(matches)} sessions match ({', '.join(matches[:10])})" if matches else "no session matches"
                known = ", ".join(s["session_id"] for s in reader.sessions()[-10:]) or "none"
                raise InputError(f"--resume {resume}: {found} in store {path}; expected one stored session id "
                                 f"(or a unique prefix of one; sessions: {known})", source=path, field="--resume")
            session = reader.session(matches[0])
            ok = reader.ok_results(matches[0])
            # results kept beside the store when it could not take them count as done: they are
            # taken in below, once the store is open for writing
            for side in reader.side_files():
                kept, _, _ = read_importable(side)
                stored = {r["run_id"] for r in reader.records([matches[0]])}
                ok += [(r.get("run_key"), r.get("replicate") if isinstance(r.get("replicate"), int) else None)
                       for r in kept if r["session_id"] == matches[0] and r.get("status") == "ok"
                       and r["run_id"] not in stored]
        session_id = session["session_id"]
        if session.get("state") == "running" and owner_alive(session.get("owner")):
            owner = session["owner"]
            raise InputError(f"--resume {resume}: session {session_id} is still running (pid {owner.get('pid')} on "
                             f"{owner.get('host')}); resuming it now would run its runs twice. Wait for it, or stop it "
                             "first", field="--resume")
        settings = session.get("settings") or {}
        entries = session["plan"]
        # the settings that shaped the session's runs apply to the rest of them
        if "memory_limit_bytes" in settings:
            stored = settings.get("memory_limit_bytes")
            if limit_bytes is not None and limit_bytes != stored:
                raise InputError(
                    f"--memory-limit {memory_limit}: session {session_id} ran "
                    f"{'with --memory-limit ' + settings.get('memory_limit') if stored else 'without --memory-limit'}, "
                    "and its other runs are resumed alike (leave the option out, or start a new session)",
                    field="--memory-limit")
            limit_bytes = stored
        if timeout is not None and "timeout_s" in settings and timeout != settings.get("timeout_s"):
            raise InputError(f"--timeout {timeout:g}: session {session_id} ran with "
                             f"{'--timeout %g' % settings['timeout_s'] if settings.get('timeout_s') else 'the timeout of its file'}"
                             ", and its other runs are resumed alike (leave the option out)", field="--timeout")
        capacity_mode = any("capacity" in entry for entry in entries)
        if find_max_batch and not capacity_mode:
            raise InputError(f"--find-max-batch: session {session_id} was not a capacity search; resume it without "
                             "the option", field="--find-max-batch")
        if capacity_mode:  # a search is done when its capacity record is ok; its probes are redone
            from harness.capacity import capacity_key

            groups, seen = [], {key for key, _ in ok}
            for entry in entries:
                spec = RunSpec.from_dict({**entry, "run_id": new_id()})
                if capacity_key(spec) not in seen:
                    seen.add(capacity_key(spec))
                    groups.append((entry["capacity"], [spec]))
            plan = [spec for _, specs in groups for spec in specs]
            total = len({capacity_key(RunSpec.from_dict(entry)) for entry in entries})
            click.echo(f"resuming session {session_id}: {len(plan)} of {total} capacity search(es) "
                       "have no ok result", err=True)
        else:
            groups = []
            todo = remaining_runs(entries, ok)
            plan = [RunSpec.from_dict({**entry, "run_id": new_id()}) for entry, left in zip(entries, todo) if left]
            if timeout is not None and "timeout_s" not in settings:  # a session stored before settings were
                from dataclasses import replace

                plan = [replace(spec, measure={**spec.measure, "timeout_s": float(timeout)}) for spec in plan]
            click.echo(f"resuming session {session_id}: {len(plan)} of {len(entries)} run(s) have no ok result", err=True)
        if dry_run:
            click.echo(f"plan: {len(plan)} run(s) left of session {session_id} (dry run: nothing executed)")
            for i, spec in enumerate(plan, 1):
                click.echo(f"  {i:>3}. {spec.label()}")
            return
        store = Store(path)
        store.session(session_id)  # known to the store, for a side file
    else:
        path = resolve_scenario_path(scenario_file)
        scenarios = load_scenarios(path, list(overrides), max_runs=max_runs or DEFAULT_MAX_RUNS)
        chosen = None
        if backends and "all" not in [b.lower() for b in backends]:
            chosen = []
            for b in backends:
                name = resolve_backend_name(b, field="--backend")
                if name not in chosen:
                    chosen.append(name)
        chosen_devices = [normalize_device(d) for d in devices] or None
        session_id = new_id()
        plans = [(s, build_plan(s, session_id, backends=chosen, devices=chosen_devices, timeout_s=timeout)) for s in scenarios]
        plan = [spec for _, specs in plans for spec in specs]
        if len(plan) > (max_runs or DEFAULT_MAX_RUNS):
            raise InputError(f"{path}: the plan has {len(plan)} runs, more than --max-runs {max_runs or DEFAULT_MAX_RUNS}",
                             field="--max-runs")
        capacity_mode = find_max_batch or any(s.capacity is not None for s in scenarios)
        # each group: the capacity search's settings (used only in capacity mode) and its specs
        groups = [(s.capacity.model_dump() if s.capacity else {}, specs) for s, specs in plans]
        for s in scenarios:
            if capacity_mode and "batch_size" not in WORKLOADS[s.workload].params_model.model_fields:
                raise InputError(f"{path}: --find-max-batch: workload {s.workload} has no batch_size", field="--find-max-batch")
        if dry_run:
            click.echo(f"plan: {len(plan)} run(s), session {session_id} (dry run: nothing executed)")
            for i, spec in enumerate(plan, 1):
                click.echo(f"  {i:>3}. {spec.label()}")
            return
        store = Store(store_path)
        # a capacity session stores each spec's search settings, so --resume can redo the search
        entries = [{**spec.to_dict(), "capacity": settings} if capacity_mode else spec.to_dict()
                   for settings, specs in groups for spec in specs]
        # what shapes the runs beyond the plan itself, applied again by --resume
        session_settings = {"memory_limit_bytes": limit_bytes, "memory_limit": memory_limit, "timeout_s": timeout,
                            "find_max_batch": bool(find_max_batch), "backends": chosen, "devices": chosen_devices,
                            "overrides": list(overrides), "max_runs": max_runs}

    from harness.runner import Interrupted

    begun = False
    try:
        for side in store.side_files():  # results an earlier process could not store: take them in first
            counts = store.import_file(side)
            try:
                side.unlink()
            except OSError:
                pass
            click.echo(f"took in {counts['new']} result(s) kept in {side} when this store could not be written", err=True)
        free = _free_bytes(store.path)
        if free is not None and free < LOW_DISK_BYTES:
            click.echo(f"warning: only {free / 2**20:.0f} MiB free where the store is ({store.path}); a result it cannot "
                       "take is kept in a side file, and the session stops", err=True)
        for abandoned in store.abandoned:
            click.echo(f"note: session {abandoned} was left running by a process that has ended; it is marked abandoned "
                       f"(finish it with: harness run --resume {abandoned} --store {shlex.quote(store.path)})", err=True)
        if resume is None:
            store.begin_session(session_id, entries, scenario_path=str(path),
                                command=shlex.join(["harness"] + sys.argv[1:]), settings=session_settings)
        else:
            store.reopen_session(session_id)
        begun = True
        outcome = _run_session(store, session_id, plan, groups, capacity_mode, limit_bytes, quiet)
    except BaseException as exc:
        if begun:  # a session is never left running by a process that has ended
            _mark(store, session_id, "interrupted" if isinstance(exc, (Interrupted, KeyboardInterrupt)) else "failed")
        store.close()
        raise
    _finish(store, session_id, plan, outcome)


def _run_session(store, session_id, plan, groups, capacity_mode, limit_bytes, quiet):
    """Execute the plan (or the capacity searches); every way it can end is in the outcome."""
    from harness.envcheck import environment_warnings
    from harness.errors import StoreWriteError
    from harness.runner import Interrupted, Runner, SessionOutcome, trap_signals

    outcome = SessionOutcome()
    with trap_signals():
        try:
            for warning in environment_warnings():
                click.echo(f"warning: {warning}", err=True)
            click.echo(f"session {session_id}: {len(plan)} run(s); results go to {store.path}", err=True)
            runner = Runner(store, on_start=None if quiet else _progress_start,
                            on_result=None if quiet else _progress_result, memory_limit_bytes=limit_bytes)
            if capacity_mode:
                from harness.capacity import find_max_batch as search

                for settings, specs in groups:
                    try:
                        part = search(runner, specs, **settings)
                    except StoreWriteError as exc:
                        outcome.store_error = exc
                        break
                    outcome.records.extend(part.records)
                    if part.interrupted:
                        outcome.interrupted = part.interrupted
                        break
            else:
                part = runner.run(plan)
                outcome.records.extend(part.records)
                outcome.interrupted, outcome.store_error = part.interrupted, part.store_error
        except (Interrupted, KeyboardInterrupt) as exc:
            outcome.interrupted = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
    return outcome


def _finish(store, session_id, plan, outcome) -> None:
    """Mark the session, say what happened and exit with its code."""
    from harness.record import FAILING_STATUSES
    from harness.table import summary_table

    resume_hint = f"harness run --resume {session_id} --store {shlex.quote(store.path)}"
    with _signals_ignored():  # a second Ctrl-C does not stop the session from being marked
        if outcome.store_error is not None:
            _mark(store, session_id, "failed")
            store.close()
            if outcome.records:
                click.echo(summary_table(outcome.records))
            error = outcome.store_error
            click.echo(f"error: {error}", err=True)
            if error.kept_in:
                click.echo(f"once the store can be written again (free space; a damaged store: move it aside), take them "
                           f"back in and finish the session: harness results --import {shlex.quote(error.kept_in)} "
                           f"--store {shlex.quote(store.path)}; then {resume_hint}", err=True)
            code = 1
        elif outcome.interrupted:
            _mark(store, session_id, "interrupted")
            store.close()
            name = signal.Signals(outcome.interrupted).name
            click.echo(
                f"interrupted by {name}: {len(outcome.records)} of {len(plan)} run(s) finished and are stored in "
                f"{store.path}; finish with: {resume_hint}",
                err=True,
            )
            code = 128 + int(outcome.interrupted)
        else:
            _mark(store, session_id, "finished")
            store.close()
            click.echo(summary_table(outcome.records))
            failed = [r for r in outcome.records if r.get("status") in FAILING_STATUSES]
            code = 0
            if failed:
                click.echo(f"{len(failed)} of {len(outcome.records)} run(s) did not succeed", err=True)
                code = 1
    if code:
        sys.exit(code)
