"""`harness run`: expand a scenario into runs, execute each in its own process, store every result."""

from __future__ import annotations

import os
import shlex
import signal
import sys

import click

from harness.commands.choice import Choice
from harness.commands.lines import echo_wrapped, too_few_processes
from harness.errors import InputError
from harness.present.fitting import terminal_width
from harness.present.live import (
    LiveDisplay,
    forecast_lines,
    format_duration,
    run_label,
    say,
    shared_line,
    varying_keys,
)
from harness.present.table import configuration_summary
from harness.results.store import redact
from harness.scenario.load import DEFAULT_MAX_RUNS
from harness.scenario.schema import Capacity, parse_resolution
from harness.session.app import (
    FinishedSession,
    PreparedSession,
    SessionRequest,
    planned_forecast,
    prepare_session,
    run_session,
)
from harness.session.executors import EXECUTORS, sbatch_pairs, slurm_settings
from harness.session.interrupt import Interrupted, trap_signals
from harness.session.limits import MIN_MEMORY_LIMIT_TEXT, check_timeout


def _cluster_flag(ctx, param, value):
    """--nnodes, --node-rank, --rdzv-endpoint, --rdzv-id: kept in HARNESS_NNODES etc., which the Runner reads
    (harness.seam.distributed.Cluster.from_env checks them together)."""
    if value is not None:
        os.environ[f"HARNESS_{param.name.upper()}"] = str(value)
    return value


def _check_timeout(ctx, param, value):
    """--timeout: finite, more than 0, at most 7 days (InputError, exit 2, otherwise)."""
    return check_timeout(value)


class Resolution(click.ParamType):
    """--capacity-resolution: a number of images, or a share of the answer ("2%")."""

    name = "resolution"

    def convert(self, value, param, ctx):
        try:
            return parse_resolution(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _slurm_settings(executor: str, flags: dict):
    """The Slurm settings of --executor slurm (InputError, exit 2, for a bad value); --slurm-* without it is refused."""
    given = sorted(k for k, v in flags.items() if v not in (None, ()))
    if executor != "slurm":
        if given:
            raise InputError(f"--{given[0].replace('_', '-')} is for --executor slurm", field=given[0])
        return None
    values = {"partition": flags["slurm_partition"], "account": flags["slurm_account"], "time": flags["slurm_time"],
              "gpus_per_job": flags["slurm_gpus"], "gres": flags["slurm_gres"], "constraint": flags["slurm_constraint"],
              "sbatch": sbatch_pairs(flags["slurm_args"])}
    return slurm_settings(flags["slurm_config"], values)


def _show_dry_run(prepared: PreparedSession, wide: bool = False) -> None:
    """The plan a dry run would execute, a line a run (fitting the terminal: what every run shares is
    said once above them; `wide`: every setting on every line), and its forecast."""
    if prepared.resumed is not None:
        echo_wrapped(f"plan: {len(prepared.plan)} run(s) left of session {prepared.session_id} "
                     "(dry run: nothing executed)", indent="  ")
    else:
        echo_wrapped(f"plan: {len(prepared.plan)} run(s), session {prepared.session_id} (dry run: nothing executed)",
                     indent="  ")
    varying = None if wide else varying_keys(prepared.plan)
    shared = None if wide else shared_line(prepared.plan, varying, terminal_width())
    if shared:
        click.echo(shared)
    for i, spec in enumerate(prepared.plan, 1):
        click.echo(f"  {i:>3}. {run_label(spec, varying, None if wide else terminal_width() - 7)}")
    for measured in dict.fromkeys(spec.measure.describe() for spec in prepared.plan):
        echo_wrapped(measured, "measure: ", indent="  ")
    warning = too_few_processes(prepared.plan)
    if warning:
        echo_wrapped(warning, indent="  ", err=True)
    if prepared.rounds is not None:
        most = sum(spec.measure.process_bounds()[1] for spec in prepared.rounds.configurations)
        echo_wrapped(f"processes auto: these {len(prepared.plan)} run(s), then rounds while a CI over processes is "
                     f"wide; at most {min(most, prepared.rounds.limit or most)} in all", indent="  ")
    say(forecast_lines(planned_forecast(prepared)))
    if prepared.time_limit_s is not None:
        echo_wrapped(f"time limit: {format_duration(prepared.time_limit_s)} from the session's start; a run is started "
                     "only while the time earlier runs say it takes (its configuration's median, else the longest of "
                     "its backend, workload and execution) fits in what is left; the rest stay for --resume",
                     indent="  ")


def _show_finished(finished: FinishedSession, wide: bool) -> None:
    """What happened: the summary table and, where the session did not simply succeed, why and what next."""
    outcome, records = finished.outcome, finished.records
    if outcome.store_error is not None:
        if records:
            click.echo(configuration_summary(records, wide=wide))
        error = outcome.store_error
        click.echo(f"error: {error}", err=True)
        if error.kept_in and not error.in_store:  # in the store's log: its message says what to do
            click.echo(f"once the store can be written again (free space; a damaged store: move it aside), take them "
                       f"back in and finish the session: harness results --import {shlex.quote(error.kept_in)} "
                       f"--store {shlex.quote(finished.store_path)}; then {finished.resume_command}", err=True)
    elif outcome.time_limit is not None:
        if records:
            click.echo(configuration_summary(records, wide=wide))
        stop = outcome.time_limit
        why = (f"it was expected to take about {format_duration(stop.expected_s)} ({stop.basis}) and "
               f"{format_duration(stop.left_s)} were left" if stop.expected_s is not None else stop.basis)
        click.echo(f"time limit ({format_duration(stop.limit_s)}) reached: {len(records)} run(s) finished and are stored "
                   f"in {finished.store_path}; run {stop.index} ({run_label(stop.spec, None, 100)}) was not started: "
                   f"{why}. Go on with: {finished.resume_command}", err=True)
    elif outcome.interrupted:
        name = signal.Signals(outcome.interrupted).name
        of = (f"{len(records)} of {finished.planned}" if len(records) <= finished.planned else
              f"{len(records)} ({finished.planned} planned, {len(records) - finished.planned} added by processes: auto)")
        click.echo(f"interrupted by {name}: {of} run(s) finished and are stored in "
                   f"{finished.store_path}; finish with: {finished.resume_command}", err=True)
    else:
        click.echo(configuration_summary(records, wide=wide))
        if finished.failed:
            click.echo(f"{len(finished.failed)} of {len(records)} run(s) did not succeed", err=True)
        elif finished.nothing_measured:
            reasons = sorted({str(r.error or r.status).splitlines()[0][:150] for r in records})
            statuses = ", ".join(sorted({str(r.status) for r in records}))
            say([f"no run was ok: all {len(records)} run(s) were {statuses}, so nothing was measured "
                 f"(exit {finished.exit_code}): {'; '.join(reasons[:3])}"])


def _nothing_to_run(prepared: PreparedSession) -> str:
    left = prepared.resumed
    return f"nothing to run: session {prepared.session_id} has every result ({left.planned} {left.what})"


def _run(request: SessionRequest, dry_run: bool, quiet: bool, wide: bool) -> None:
    """Plan the session, run it (or show a dry run's plan), say how it ended and exit with its code."""
    display = LiveDisplay(quiet=quiet)
    prepared = prepare_session(request, display)
    left = prepared.resumed
    if left is not None:
        # a session stored as running is opened even with nothing left: the store refuses one another host runs
        if not left.left and prepared.rounds is None and not dry_run and (left.seen or {}).get("state") != "running":
            click.echo(_nothing_to_run(prepared))  # nor can processes: auto add a round
            return
        click.echo(f"resuming session {prepared.session_id}: {left.left} of {left.planned} {left.what} have no ok "
                   "result", err=True)
    if dry_run:
        _show_dry_run(prepared, wide)
        return
    display.use_plan(prepared.plan, wide)
    finished = run_session(prepared, display)
    with trap_signals(signal.SIG_IGN):  # a second Ctrl-C does not cut the summary short
        if left is not None and not finished.records and not finished.exit_code:
            click.echo(_nothing_to_run(prepared))  # processes: auto found no round to add either
        else:
            _show_finished(finished, wide)
    if finished.exit_code:
        sys.exit(finished.exit_code)


@click.command("run")
@click.argument("scenario_file", required=False)
@click.option("--backend", "backends", multiple=True, metavar="NAME",
              help="Run only these backends: torch/pytorch, tensorflow/tf or any installed plugin "
                   "(repeatable; 'all' = every backend in the file).")
@click.option("--device", "devices", multiple=True, metavar="DEV",
              help="auto, cpu, cuda:N or gpu:N (repeatable); replaces the file's devices.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a parameter (a [list] sweeps it), measure.FIELD, seed or name.")
@click.option("--document", "documents", multiple=True, metavar="NAME",
              help="Run only the documents of a multi-document file with this name (repeatable).")
@click.option("--store", "store_path", default=None,
              help="SQLite store file, or a postgresql://USER@HOST/DB database (default harness.db or $HARNESS_STORE).")
@click.option("--timeout", type=float, default=None, callback=_check_timeout,
              help="Seconds one run may take before it is stopped (default measure.timeout_s).")
@click.option("--max-runs", type=click.IntRange(min=1), default=None, help=f"Largest plan accepted (default {DEFAULT_MAX_RUNS}).")
@click.option("--time-limit", default=None, metavar="DURATION",
              help="Start no run expected to end after this long from the session's start (540, 9m, 1h30m or "
                   "[HH:]MM:SS), judged by earlier runs in the store; the session then exits 75 and --resume goes on.")
@click.option("--dry-run", is_flag=True, help="Print the plan and exit.")
@click.option("--resume", "resume", default=None, metavar="SESSION",
              help="Run the runs of a stored session that have no ok result, with the session's own settings (an "
                   "unsupported answer stands, unless it was for a backend, framework or GPU missing).")
@click.option("--find-max-batch", is_flag=True, help="Search the largest batch_size that fits, per configuration.")
@click.option("--capacity-start", type=click.IntRange(min=1), default=None, metavar="N",
              help="--find-max-batch: the first batch_size probed (overrides the file's capacity.start; default "
                   f"{Capacity().start}, or "
                   "the smallest batch every configuration can train on).")
@click.option("--capacity-limit", type=click.IntRange(min=1), default=None, metavar="N",
              help=f"--find-max-batch: the largest batch_size probed (overrides capacity.limit; default {Capacity().limit}).")
@click.option("--capacity-resolution", type=Resolution(), default=None, metavar="N|P%",
              help="--find-max-batch: stop bisecting when the answer is known to within N images, or to within "
                   f"P percent of it (e.g. 2%) (overrides capacity.resolution; default {Capacity().resolution}).")
@click.option("--memory-limit", default=None, metavar="SIZE",
              help=f"Cap each worker's host memory (e.g. 4GiB; at least {MIN_MEMORY_LIMIT_TEXT}): emulate a smaller "
                   "machine on the CPU.")
@click.option("--nnodes", type=click.IntRange(min=1, max=1024), default=None, expose_value=False, callback=_cluster_flag,
              help="Data-parallel runs (replicas > 1) over N machines: run the same command on each (docs/distributed.md).")
@click.option("--node-rank", type=click.IntRange(min=0), default=None, expose_value=False, callback=_cluster_flag,
              help="With --nnodes: this machine's place, 0..N-1; node 0 holds global rank 0 and stores the records.")
@click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT", expose_value=False, callback=_cluster_flag,
              help="With --nnodes: node 0's address for torchrun's rendezvous (ports PORT..PORT+31 are used).")
@click.option("--rdzv-id", default=None, metavar="ID", expose_value=False, callback=_cluster_flag,
              help="With --nnodes: a name shared by the nodes of one session (torchrun's --rdzv-id prefix).")
@click.option("--executor", type=Choice(EXECUTORS), default="local", show_default=True,
              help="Where runs execute: worker processes here, or Slurm jobs (docs/distributed.md).")
@click.option("--slurm-config", default=None, metavar="FILE",
              help="--executor slurm: a YAML file of Slurm options (partition, account, time, gres...); flags win.")
@click.option("--slurm-partition", default=None, metavar="NAME", help="--executor slurm: the partition.")
@click.option("--slurm-account", default=None, metavar="NAME", help="--executor slurm: the account charged.")
@click.option("--slurm-time", default=None, metavar="TIME",
              help="--executor slurm: each job's time limit (minutes, MM:SS, HH:MM:SS; default: the run's timeout).")
@click.option("--slurm-gpus", type=click.IntRange(min=0), default=None, metavar="N",
              help="--executor slurm: whole GPUs per job (gres gpu:N; default: what the run's device needs).")
@click.option("--slurm-gres", default=None, metavar="GRES", help="--executor slurm: the jobs' gres, e.g. gpu:a6000:1.")
@click.option("--slurm-constraint", default=None, metavar="FEATURES", help="--executor slurm: node features.")
@click.option("--slurm-arg", "slurm_args", multiple=True, metavar="KEY=VALUE",
              help="--executor slurm: any other sbatch option (repeatable), e.g. qos=high.")
@click.option("--profile", is_flag=True,
              help="After each run's timed blocks, profile a few more steps with the framework's own profiler: the "
                   "record's `profile` breakdown (measure.profile=true; docs/profile.md).")
@click.option("--share-host", is_flag=True,
              help="Let these runs be timed while other harness sessions on this host time theirs (one per GPU): "
                   "recorded in each record, and compare marks their verdicts (measure.share_host=true; "
                   "docs/reliability.md).")
@click.option("--quiet", "-q", is_flag=True, help="No per-run progress lines.")
@click.option("--wide", is_flag=True,
              help="Every setting on every run line, and the summary with one row per process, every column in full.")
def command(scenario_file, backends, devices, overrides, documents, store_path, timeout, max_runs, time_limit, dry_run,
            resume,
            find_max_batch, capacity_start, capacity_limit, capacity_resolution, memory_limit, profile, executor,
            quiet, wide, share_host, **slurm) -> None:
    """Run SCENARIO_FILE (a path, or the name of a bundled scenario such as `quickstart`).

    Shows each run as it goes (on a terminal one live line: phase, rate so far, time left; else a
    line per first step and timed block); -q shows only warnings and the summary. Before a session
    it estimates its time from earlier runs of the same configurations in the store, and warns when
    a GPU-sized session is about to run on the CPU.
    """
    capacity = {k: v for k, v in (("start", capacity_start), ("limit", capacity_limit),
                                  ("resolution", capacity_resolution)) if v is not None}
    request = SessionRequest(scenario_file=scenario_file, resume=resume, backends=tuple(backends),
                             devices=tuple(devices), store_path=store_path, timeout=timeout,
                             overrides=tuple(overrides) + (("measure.profile=true",) if profile else ())
                             + (("measure.share_host=true",) if share_host else ()),
                             max_runs=max_runs, find_max_batch=find_max_batch, capacity=capacity,
                             memory_limit=memory_limit, command=redact(shlex.join(["harness"] + sys.argv[1:])),
                             documents=tuple(documents), executor=executor, slurm=_slurm_settings(executor, slurm),
                             time_limit=time_limit)
    with trap_signals():  # from the start: Ctrl-C at any moment ends cleanly, with the session marked
        try:
            _run(request, dry_run, quiet, wide)
        except (Interrupted, KeyboardInterrupt) as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
            click.echo(f"interrupted by {signal.Signals(signum).name} before any run finished: nothing was run", err=True)
            sys.exit(128 + signum)
