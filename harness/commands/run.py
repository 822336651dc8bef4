"""`harness run`: expand a scenario into runs, execute each in its own process, store every result."""

from __future__ import annotations

import shlex
import signal
import sys

import click

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 10**6, "mb": 10**6, "mib": 1024**2,
          "g": 10**9, "gb": 10**9, "gib": 1024**3, "t": 10**12, "tb": 10**12, "tib": 1024**4}


def parse_size(text: str) -> int:
    """Bytes from a size such as 512MiB, 4GiB, 2G or 1000000; InputError otherwise."""
    import re

    from harness.errors import InputError

    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text or "")
    if not match or match.group(2).lower() not in _UNITS or float(match.group(1)) <= 0:
        raise InputError(f"--memory-limit {text!r}: expected a size such as 512MiB, 4GiB or 2G", field="--memory-limit")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


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
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds one run may take before it is stopped (default measure.timeout_s).")
@click.option("--max-runs", type=click.IntRange(min=1), default=None, help="Largest plan accepted (default 1000).")
@click.option("--dry-run", is_flag=True, help="Print the plan and exit.")
@click.option("--resume", "resume", default=None, metavar="SESSION",
              help="Rerun the runs of a stored session that have no ok result.")
@click.option("--find-max-batch", is_flag=True, help="Search the largest batch_size that fits, per configuration.")
@click.option("--memory-limit", default=None, metavar="SIZE",
              help="Cap each worker's host memory (e.g. 4GiB): emulate a smaller machine on the CPU.")
@click.option("--quiet", "-q", is_flag=True, help="No per-run progress lines.")
def command(scenario_file, backends, devices, overrides, store_path, timeout, max_runs, dry_run, resume,
            find_max_batch, memory_limit, quiet) -> None:
    """Run SCENARIO_FILE (a path, or the name of a bundled scenario such as `quickstart`)."""
    from harness.bundled import resolve_scenario_path
    from harness.devices import normalize_device
    from harness.envcheck import environment_warnings
    from harness.errors import InputError
    from harness.plan import RunSpec, build_plan, new_id
    from harness.record import FAILING_STATUSES
    from harness.runner import Runner
    from harness.backend import resolve_backend_name
    from harness.scenario import DEFAULT_MAX_RUNS, load_scenarios
    from harness.workloads import WORKLOADS
    from harness.store import Store
    from harness.table import summary_table

    if resume and scenario_file:
        raise InputError("give either SCENARIO_FILE or --resume SESSION, not both", field="--resume")
    if not resume and not scenario_file:
        raise InputError("missing SCENARIO_FILE (or --resume SESSION)", field="SCENARIO_FILE")

    capacity_mode = False
    if resume:
        store = Store(store_path)
        session = store.session(resume)
        if session is None:
            raise InputError(f"--resume {resume}: no single stored session matches in {store.path}", field="--resume")
        session_id = session["session_id"]
        done = store.ok_run_keys(session_id)
        entries = session["plan"]
        capacity_mode = any("capacity" in entry for entry in entries)
        if capacity_mode:  # a search is done when its capacity record is ok; its probes are redone
            from harness.capacity import capacity_key

            groups, seen = [], set(done)
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
            plan = [RunSpec.from_dict({**s, "run_id": new_id()}) for s in entries if s["run_key"] not in done]
            click.echo(f"resuming session {session_id}: {len(plan)} of {len(entries)} run(s) have no ok result", err=True)
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
        store.begin_session(session_id, entries, scenario_path=str(path),
                            command=shlex.join(["harness"] + sys.argv[1:]))

    for warning in environment_warnings():
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"session {session_id}: {len(plan)} run(s); results go to {store.path}", err=True)
    runner = Runner(store, on_start=None if quiet else _progress_start, on_result=None if quiet else _progress_result,
                    memory_limit_bytes=parse_size(memory_limit) if memory_limit else None)
    if capacity_mode:
        from harness.capacity import find_max_batch as search
        from harness.runner import SessionOutcome

        outcome = SessionOutcome()
        for settings, specs in groups:
            part = search(runner, specs, **settings)
            outcome.records.extend(part.records)
            if part.interrupted:
                outcome.interrupted = part.interrupted
                break
    else:
        outcome = runner.run(plan)

    if outcome.interrupted:
        store.end_session(session_id, "interrupted")
        name = signal.Signals(outcome.interrupted).name
        click.echo(
            f"interrupted by {name}: {len(outcome.records)} of {len(plan)} run(s) finished and are stored in "
            f"{store.path}; finish with: harness run --resume {session_id} --store {store.path}",
            err=True,
        )
        store.close()
        sys.exit(128 + int(outcome.interrupted))
    store.end_session(session_id, "finished")
    store.close()
    click.echo(summary_table(outcome.records))
    failed = [r for r in outcome.records if r.get("status") in FAILING_STATUSES]
    if failed:
        click.echo(f"{len(failed)} of {len(outcome.records)} run(s) did not succeed", err=True)
        sys.exit(1)
