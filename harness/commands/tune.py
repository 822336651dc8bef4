"""`harness tune`: each framework's fastest configuration of a scenario's sweep, found by racing over processes."""

from __future__ import annotations

import json
import shlex
import signal
import sys

import click

from harness.present.live import LiveDisplay
from harness.results.compare import fmt
from harness.results.compare.verdicts import plural
from harness.results.store import redact
from harness.session.app import EXIT_TIME_LIMIT, SessionRequest
from harness.session.executors import EXECUTORS
from harness.session.interrupt import Interrupted, trap_signals
from harness.session.tune.tuning import TuneSettings, prepare_tune, run_tune


def _interval(row: dict) -> str:
    low, high = row["interval"]
    return f" [{fmt(low)}, {fmt(high)}]" if low is not None else ""


def answer_lines(answer: dict) -> list[str]:
    """The answer as text: per framework its fastest, the runner-up and verdict; the bests compared; the cost."""
    unit = answer["unit"] or ""
    best_word = "fastest" if answer["metric"] in ("median", "tflops", "pct_of_peak", "step_time_s",
                                                   "first_step_s") else "best"
    lines = []
    for f in answer["frameworks"]:
        best = f["best"]
        if best is None:
            lines.append(f"{f['framework']}: nothing measured")
            continue
        lines.append(f"{f['framework']}: {best_word} {best['configuration']}: {fmt(best['figure'])} {unit}"
                     f"{_interval(best)} (median of {plural(best['processes'])})")
        runner = f["runner_up"]
        if runner:
            change = f"{100 * (runner['ratio'] - 1):+.1f}%" if runner["ratio"] else "n/a"
            lines.append(f"  runner-up {runner['configuration']}: {fmt(runner['figure'])} {unit} ({change}, "
                         f"{plural(runner['processes'])}): {runner['verdict']}")
        if f["ties"]:
            lines.append(f"  tied with the {best_word}: {', '.join(f['ties'])}")
        if f["undecided"]:
            lines.append(f"  undecided (at the process limit or stopped): {', '.join(f['undecided'])}")
        for d in f["dropped"]:
            lines.append(f"  dropped {d['configuration']} ({plural(d['processes'])}): {d['reason']}")
    for b in answer["between_frameworks"]:
        change = f"{100 * (b['ratio'] - 1):+.1f}%" if b["ratio"] else "n/a"
        lines.append(f"{b['other']} against {b['baseline']} (bests): {change}: {b['verdict']}")
    cost = answer["cost"]
    lines.append(f"cost: {plural(cost['processes'])} of {cost['configurations']} configurations "
                 f"(the exhaustive plan: {cost['exhaustive_processes']}), {cost['run_time_s']:.1f} s of run time; "
                 f"session {cost['session_id']} in {cost['store']}")
    return lines


@click.command("tune")
@click.argument("scenario_file", required=False)
@click.option("--backend", "backends", multiple=True, metavar="NAME", help="Tune only these backends (repeatable).")
@click.option("--device", "devices", multiple=True, metavar="DEV", help="auto, cpu, cuda:N or gpu:N (repeatable).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a parameter (a [list] is a dimension of the search; one value fixes it).")
@click.option("--document", "documents", multiple=True, metavar="NAME", help="Only these documents of the file.")
@click.option("--store", "store_path", default=None, help="SQLite store file or postgresql:// database.")
@click.option("--resume", default=None, metavar="SESSION",
              help="Go on with a stored tuning session (give its SCENARIO_FILE and options again).")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="Where runs execute: worker processes here, or Slurm jobs.")
@click.option("--time-limit", default=None, metavar="DURATION",
              help="Start no process expected to end after this long; the answer then says what is undecided.")
@click.option("--max-processes", type=int, default=None, metavar="N",
              help="The most processes one configuration gets (default: as many as `run` would plan for it, "
                   "4 under processes: auto).")
@click.option("--metric", default="median", show_default=True,
              help="The figure raced on: median (the headline), tflops, step_time_s, first_step_s, "
                   "peak_allocated_bytes, energy_j (where NVML gives power), ...")
@click.option("--max-device-memory", default=None, metavar="SIZE",
              help="Device memory a configuration may use (its allocator peak), e.g. 24GiB; beyond it, it is out. "
                   "(run's --memory-limit caps host memory.)")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No per-run progress lines.")
def command(scenario_file, backends, devices, overrides, documents, store_path, resume, executor, time_limit,
            max_processes, metric, max_device_memory, as_json, quiet) -> None:
    """Tune SCENARIO_FILE: each framework's fastest configuration of its sweep, by racing over processes.

    One process of every configuration, then more only for those that can still be their framework's
    fastest; every process is an ordinary record. docs/tune.md says how and how often it errs.
    """
    request = SessionRequest(scenario_file=scenario_file, resume=resume, backends=tuple(backends),
                             devices=tuple(devices), store_path=store_path, overrides=tuple(overrides),
                             command=redact(shlex.join(["harness"] + sys.argv[1:])), documents=tuple(documents),
                             executor=executor, time_limit=time_limit)
    settings = TuneSettings(metric=metric, max_processes=max_processes, max_device_memory=max_device_memory)
    with trap_signals():
        try:
            display = LiveDisplay(quiet=quiet or as_json)
            tuned = prepare_tune(request, settings, display)
            display.use_plan(tuned.prepared.plan, False)
            finished, answer = run_tune(tuned, display)
        except (Interrupted, KeyboardInterrupt) as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
            click.echo(f"interrupted by {signal.Signals(signum).name}", err=True)
            sys.exit(128 + signum)
    click.echo(json.dumps(answer, indent=2, default=str) if as_json else "\n".join(answer_lines(answer)))
    if finished.exit_code == EXIT_TIME_LIMIT:
        click.echo(f"time limit reached; go on with: harness tune {shlex.quote(scenario_file)} --resume "
                   f"{finished.session_id} --store {shlex.quote(finished.store_path)}", err=True)
    if finished.exit_code:
        sys.exit(finished.exit_code)
