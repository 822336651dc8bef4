"""What `harness run` shows while a session runs: notes and warnings, the session's header and forecast, each
run's line, its live progress and its result, on standard error."""

from __future__ import annotations

import shutil
import textwrap
import time
from collections import Counter

import click

from harness.present.fitting import describe, terminal_width
from harness.results.record import Result
from harness.session.forecast import CPU_TFLOPS, Forecast
from harness.session.progress import ProgressEvent
from harness.session.request import SessionObserver, SessionStarted
from harness.workloads import WORKLOADS


def format_duration(seconds: float) -> str:
    """0.4 s, 45 s, 12 min, 2.3 h: how a person says how long something takes."""
    if seconds < 10:
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def duration_range(low: float, high: float) -> str:
    """`2.0-9.7 hours`: a range of durations in the unit of its high end."""
    if high < 90:
        return f"{low:.0f}-{high:.0f} seconds"
    if high < 90 * 60:
        return f"{low / 60:.0f}-{high / 60:.0f} minutes"
    return f"{low / 3600:.1f}-{high / 3600:.1f} hours"


def forecast_lines(forecast: Forecast) -> list[str]:
    """A forecast in words: the estimate from earlier runs, and the warning before a GPU-sized session on the CPU."""
    lines = []
    runs = forecast.runs
    if forecast.known_s is not None and forecast.known_runs == runs:
        lines.append(f"estimate: about {format_duration(forecast.known_s)} for {runs} run(s), from "
                     f"{forecast.earlier_runs} earlier run(s) of the same configurations in this store")
    elif forecast.known_s is not None:
        lines.append(f"estimate: about {format_duration(forecast.known_s)} for the {forecast.known_runs} of {runs} "
                     f"run(s) whose configuration ran before in this store (from {forecast.earlier_runs} earlier "
                     f"run(s)); the other {runs - forecast.known_runs} have no earlier run to go by")
    if forecast.cpu_work_tflop is not None:
        work, (low, high) = forecast.cpu_work_tflop, CPU_TFLOPS
        lines.append(
            f"warning: no GPU is visible, so this session runs on the CPU: it does about {work:,.0f} TFLOP of work; at "
            f"about {low:g}-{high:g} TFLOP/s on this CPU that is {duration_range(work / high, work / low)} (an "
            "estimate). The scenario is sized for a GPU; for a quick look on the CPU lower the work with --set "
            "(measure.processes=1, measure.steps, measure.repeats, smaller sizes), or stop now with Ctrl-C")
    return lines


def say(lines: list[str]) -> None:
    """Lines on standard error, each wrapped to the terminal's width between words."""
    for line in lines:
        click.echo(textwrap.fill(line, width=terminal_width(), subsequent_indent="  ", break_long_words=False,
                                 break_on_hyphens=False), err=True)


def _settings(spec) -> list[tuple[str, object]]:
    return [*spec.params.items(), *spec.options.items()]


def _by_workload(plan) -> dict[str, list]:
    groups: dict[str, list] = {}
    for spec in plan:
        groups.setdefault(spec.workload, []).append(spec)
    return groups


def varying_keys(plan) -> list[str]:
    """What a run's line must name to tell it from the others: the workload and device where they
    differ, and the parameters and backend options whose value differs between the runs of one workload
    (or that some of its runs lack, as a backend's option); the rest is said once (`shared_line`)."""
    varying = [k for k in ("workload", "device") if len({getattr(s, k) for s in plan}) > 1]
    for specs in _by_workload(plan).values():
        seen: dict[str, set] = {}
        present: Counter[str] = Counter()
        for spec in specs:
            for key, value in _settings(spec):
                seen.setdefault(key, set()).add(repr(value))
                present[key] += 1
        varying += [k for k, v in seen.items() if (len(v) > 1 or present[k] < len(specs)) and k not in varying]
    return varying


def shared_line(plan, varying: list[str], width: int | None = None) -> str | None:
    """`every run: KEY=VALUE, ...` for what the runs of `plan` share (one line a workload where there
    are several: `every gemm run: ...`), wrapped to the width; None where they share nothing."""
    if not plan:
        return None
    groups = _by_workload(plan)
    lines = []
    for workload, specs in groups.items():
        shared = {} if "workload" in varying else {"workload": workload}
        if "device" not in varying:
            shared["device"] = specs[0].device
        shared.update({k: v for k, v in _settings(specs[0]) if k not in varying and v is not None})
        lead = f"every {workload} run: " if len(groups) > 1 else "every run: "
        if shared:
            lines.append(describe(shared, width, lead=lead))
    return "\n".join(lines) or None


def run_label(spec, varying: list[str] | None = None, width: int | None = None) -> str:
    """A run's line: its backend, and its device, workload and settings where they tell it from the other
    runs (`varying`; None: every setting), and which process it is; shortened to `width` (None: whole)."""
    if varying is None:
        return spec.label()
    shown = ", ".join(f"{k}={v}" for k, v in [*spec.params.items(), *spec.options.items()] if k in varying)
    of = spec.process_of()
    text = (spec.backend + (f" on {spec.device}" if "device" in varying else "")
            + (f": {spec.workload}" if "workload" in varying else "") + (f" ({shown})" if shown else "") + of)
    if width is not None and len(text) > width:
        text = text[: max(1, width - 3 - len(of))].rstrip() + "..." + of
    return text


class Progress:
    """Where each run is, on standard error.

    On a terminal: the run's line, then one live status line rewritten in place (phase: starting,
    first step, warm-up, block i of n; the rate so far with its unit; time left from the last
    block's time x blocks remaining), cleared when the run's result is printed. Elsewhere (a pipe,
    a CI log): plain lines, one per event that matters (the first step done, each timed block).
    """

    def __init__(self, stream=None, live: bool | None = None, width: int | None = None):
        self.stream = stream if stream is not None else click.get_text_stream("stderr")
        if live is None:
            try:
                live = bool(self.stream.isatty())
            except (AttributeError, ValueError):
                live = False
        self.live = live
        self.width = width
        self.at = ""
        #: each started run's `[i/n]`, by run id: under Slurm several runs report progress at once
        self._at_of: dict[str, str] = {}
        self._showing = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr never stops a session
            pass

    def _line(self, text: str) -> None:
        self._clear()
        width = self.width or terminal_width()
        self._write(textwrap.fill(text, width=width, subsequent_indent="  ", break_long_words=False) + "\n")

    def _status(self, text: str, at: str | None = None) -> None:
        width = self.width or shutil.get_terminal_size((100, 24)).columns
        text = f"{at or self.at} {text}"
        if len(text) > width - 1:  # a wrapped line could not be rewritten in place
            text = text[: max(1, width - 4)] + "..."
        self._write("\r" + text + "\x1b[K")
        self._showing = True

    def _clear(self) -> None:
        if self._showing:
            self._write("\r\x1b[K")
            self._showing = False

    def start(self, i: int, n: int, spec, varying: list[str] | None = None) -> None:
        """The run's own line, on one line of the terminal: the settings in `varying` (None: all of them)
        (and, on a terminal, its status: starting)."""
        self.at = f"[{i}/{n}]"
        self._at_of[getattr(spec, "run_id", None)] = self.at
        width = None if varying is None else (self.width or terminal_width()) - len(self.at) - 5
        self._line(f"{self.at} {run_label(spec, varying, width)} ...")
        if self.live:
            self._status("starting (the worker imports its framework)")

    def result(self, i: int, n: int, record: Result) -> None:
        """The run's result: its status, its figure or the first line of its error, and its time."""
        figure = ""
        if record.median is not None:
            figure = f" {record.median:.4g} {record.unit or ''}"
        elif record.error:
            figure = f" ({str(record.error).splitlines()[0][:150]})"
        waited = record.phases_s.lock_wait
        tail = f" in {record.run_s:.1f} s" + (f" (+{waited:.0f} s waiting for the lock)" if waited else "")
        head = f"[{i}/{n}] {record.status}{figure}"
        room = (self.width or terminal_width()) - len(tail)
        if len(head) > room:  # one line: the record keeps the whole error
            head = head[: max(1, room - 3)].rstrip() + "..."
        self._line(head + tail)

    def progress(self, spec, event: ProgressEvent | dict) -> None:
        """One event from the running worker (harness.timing.loop.run_timed's phases)."""
        text = describe_event(spec, event, live=self.live)
        if text is None:
            return
        at = self._at_of.get(getattr(spec, "run_id", None), self.at)  # its own run's, not the last started
        if self.live:
            self._status(text, at)
        else:
            self._line(f"{at} {text}")


def describe_event(spec, event: ProgressEvent | dict, *, live: bool) -> str | None:
    """A progress event (or its JSON object) in words: the phase, the rate so far with its unit, the time left. None
    for an event a log need not show (not live: only the first step's end and the timed blocks)."""
    event = ProgressEvent.of(event)
    if event is None:
        return None
    phase, number = event.phase, event.figure
    probe = f"probe at batch_size={spec.param('batch_size')}: " if spec.probe else ""
    if phase == "first_step":
        return f"{probe}first step (trace, compile, autotune)..." if live else None
    if phase == "warmup":
        first, warmup = number("first_step_s"), int(number("warmup") or 0)
        done = f"first step done in {format_duration(first)}" if first is not None else "first step done"
        if live:
            return f"{probe}warm-up: {warmup} step(s) ({done})" if warmup else f"{probe}{done}; timing the first block"
        return f"{probe}{done}" + (f"; warm-up: {warmup} step(s)" if warmup else "")
    if phase == "block":
        return probe + _describe_block(spec, event)
    if phase == "host_lock":  # harness.worker.hostlock: another session on this host is timing a run
        return probe + lock_wait_text(event)
    if phase == "probe_done":  # harness.session.capacity, after each probe: its answer and where its time went
        return probe + _describe_probe(event)
    return None


def lock_wait_text(event: ProgressEvent) -> str:
    """A `host_lock` event in words: whom the run waits for and since when (the wait is not its run time),
    or how long it waited once it has the lock."""
    if event.waiting:
        return (f"waiting for the host timing lock, held by {event.holder or 'another harness session'}; "
                f"since {time.strftime('%H:%M:%S')}, not run time")
    return f"got the host's timing lock after {format_duration(event.figure('waited_s') or 0.0)}"


def _describe_block(spec, event: ProgressEvent) -> str:
    """A timed block: which of how many, the rate so far, the time left (at most, for adaptive blocks)."""
    number = event.figure
    block, repeats = int(number("block") or 0), int(number("repeats") or 0)
    most, block_s, rate = int(number("max_repeats") or repeats), number("block_s"), number("rate")
    workload = WORKLOADS.get(spec.workload)
    unit = workload.unit if workload is not None else ""
    figure = f"{rate:.4g} {unit} so far" if rate is not None else "no rate yet"
    if block < repeats:
        of = f"block {block} of {repeats}"
        left = f", about {format_duration(block_s * (repeats - block))} left" if block_s is not None else ""
    elif most > repeats and block < most:  # adaptive: more blocks until the CI is narrow enough
        of = f"block {block} (at least {repeats}, at most {most})"
        left = f", at most {format_duration(block_s * (most - block))} left" if block_s is not None else ""
    else:
        of, left = f"block {block} of {max(block, repeats)}", ""
    return f"{of}: {figure}{left}"


def _describe_probe(event: ProgressEvent) -> str:
    """A capacity probe's answer, its peak when it fit, and where its time went."""
    outcome = {True: "fits", False: "does not fit", None: "failed"}[event.fits]
    if event.fits is False and event.status not in ("oom", None):
        outcome += f" ({event.status})"
    peak = event.figure("peak_allocated_bytes")
    if event.fits and peak:
        outcome += f", peak {peak / 2**30:.1f} GiB"
    seconds, parts = event.figure("seconds"), event.phases_s
    names = (("process", "process start/exit"), ("open_device", "framework and device"),
             ("prepare", "model and inputs"), ("steps", "steps"))
    split = ", ".join(f"{label} {parts[key]:.0f} s" for key, label in names if key in parts)
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    return f"{outcome}{took}" + (f" ({split})" if split else "")


class LiveDisplay(SessionObserver):
    """A session shown on standard error: notes, the header and forecast, and (unless quiet) every run."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self._progress: Progress | None = None
        self._varying: list[str] | None = None
        self._shared: str | None = None

    def use_plan(self, plan, wide: bool = False) -> None:
        """Show each run's line with only the settings that vary across `plan` (the shared ones once, at
        the session's start); `wide`: every setting on every line, however long."""
        if not wide:
            self._varying = varying_keys(plan)
            self._shared = shared_line(plan, self._varying, terminal_width())

    @property
    def progress(self) -> Progress | None:
        """The run display (None when quiet), made when the first run starts: it looks at stderr then."""
        if self._progress is None and not self.quiet:
            self._progress = Progress()
        return self._progress

    def notice(self, text: str) -> None:
        """The note or warning, as a line on standard error."""
        click.echo(text, err=True)

    def session_started(self, started: SessionStarted) -> None:
        """The environment's warnings, the session's line (its runs, its store) and its forecast."""
        say([f"warning: {warning}" for warning in started.warnings])
        click.echo(f"session {started.session_id}: {started.runs} run(s); results go to {started.store_path}", err=True)
        say(forecast_lines(started.forecast))
        if self._shared and not self.quiet:
            click.echo(self._shared, err=True)

    def run_started(self, i: int, n: int, spec) -> None:
        """The run's line."""
        if self.progress is not None:
            self.progress.start(i, n, spec, self._varying)

    def run_progress(self, spec, event: dict) -> None:
        """The run's live status (a terminal) or its progress lines (a log); quiet, a wait for the host's
        timing lock is still said, in one line, as it starts."""
        if self.progress is not None:
            self.progress.progress(spec, event)
            return
        told = ProgressEvent.of(event)
        if told is not None and told.phase == "host_lock" and told.waiting:  # one line, however narrow
            text, width = lock_wait_text(told), terminal_width()
            click.echo(text if len(text) <= width else text[: width - 3].rstrip() + "...", err=True)

    def run_finished(self, i: int, n: int, result: Result) -> None:
        """The run's result line."""
        if self.progress is not None:
            self.progress.result(i, n, result)
