"""`harness run`: expand a scenario into runs, execute each in its own process, store every result."""

from __future__ import annotations

import math
import os
import shlex
import signal
import sys

import click

from harness.errors import InputError, StoreError, StoreWriteError
from harness.machine import nvml
from harness.machine.envcheck import environment_warnings
from harness.present.table import summary_table
from harness.results import stats
from harness.results.record import FAILING_STATUSES
from harness.results.store import (
    Store,
    default_store_path,
    owner_alive,
    read_importable,
)
from harness.seam.backend import resolve_backend_name
from harness.session.capacity import capacity_key, find_max_batch as search
from harness.session.plan import RunSpec, build_plan, new_id
from harness.session.runner import Interrupted, Runner, SessionOutcome, trap_signals
from harness.spec.bundled import resolve_scenario_path
from harness.spec.devices import normalize_device
from harness.spec.scenario import (
    DEFAULT_MAX_RUNS,
    Capacity,
    load_scenarios,
    parse_resolution,
    read_scenario_documents,
)
from harness.worker.measure import measure_settings
from harness.workloads import WORKLOADS

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 10**6, "mb": 10**6, "mib": 1024**2,
          "g": 10**9, "gb": 10**9, "gib": 1024**3, "t": 10**12, "tb": 10**12, "tib": 1024**4}

#: Exit code of a session that finished with no run ok and none failed: every run was `unsupported`
#: (a device that is not there, a combination no backend can run), so nothing was measured.
EXIT_NOTHING_MEASURED = 3

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


def _cluster_flag(ctx, param, value):
    """--nnodes, --node-rank, --rdzv-endpoint, --rdzv-id: kept in HARNESS_NNODES etc., which the Runner reads
    (harness.seam.distributed.Cluster.from_env checks them together)."""
    if value is not None:
        os.environ[f"HARNESS_{param.name.upper()}"] = str(value)
    return value


def _check_timeout(ctx, param, value):
    """--timeout: finite, more than 0, at most 7 days (InputError, exit 2, otherwise)."""

    if value is None:
        return None
    if not math.isfinite(value) or value <= 0 or value > MAX_TIMEOUT_S:
        raise InputError(f"--timeout {value!r}: expected a finite number of seconds, more than 0 and at most "
                         f"{MAX_TIMEOUT_S} (7 days)", field="--timeout")
    return value


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
        self._showing = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr never stops a session
            pass

    def _line(self, text: str) -> None:
        self._clear()
        self._write(text + "\n")

    def _status(self, text: str) -> None:
        import shutil

        width = self.width or shutil.get_terminal_size((100, 24)).columns
        text = f"{self.at} {text}"
        if len(text) > width - 1:  # a wrapped line could not be rewritten in place
            text = text[: max(1, width - 4)] + "..."
        self._write("\r" + text + "\x1b[K")
        self._showing = True

    def _clear(self) -> None:
        if self._showing:
            self._write("\r\x1b[K")
            self._showing = False

    def start(self, i: int, n: int, spec) -> None:
        self.at = f"[{i}/{n}]"
        self._line(f"{self.at} {spec.label()} ...")
        if self.live:
            self._status("starting (the worker imports its framework)")

    def result(self, i: int, n: int, record: dict) -> None:
        status = record.get("status")
        figure = ""
        if record.get("median") is not None:
            figure = f" {record['median']:.4g} {record.get('unit') or ''}"
        elif record.get("error"):
            figure = f" ({str(record['error']).splitlines()[0][:150]})"
        self._line(f"[{i}/{n}] {status}{figure} in {record.get('duration_s') or 0:.1f} s")

    def progress(self, spec, event: dict) -> None:
        """One event from the running worker (harness.worker.measure.run_timed's phases)."""
        text = describe_event(spec, event, live=self.live)
        if text is None:
            return
        if self.live:
            self._status(text)
        else:
            self._line(f"{self.at} {text}")


def describe_event(spec, event: dict, *, live: bool) -> str | None:
    """A progress event in words: the phase, the rate so far with its unit, the time left. None
    for an event a log need not show (not live: only the first step's end and the timed blocks)."""

    phase = event.get("phase")
    probe = f"probe at batch_size={spec.params.get('batch_size')}: " if spec.measure.get("probe") else ""

    def num(key):
        value = event.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    if phase == "first_step":
        return f"{probe}first step (trace, compile, autotune)..." if live else None
    if phase == "warmup":
        first, warmup = num("first_step_s"), int(num("warmup") or 0)
        done = f"first step done in {format_duration(first)}" if first is not None else "first step done"
        if live:
            return f"{probe}warm-up: {warmup} step(s) ({done})" if warmup else f"{probe}{done}; timing the first block"
        return f"{probe}{done}" + (f"; warm-up: {warmup} step(s)" if warmup else "")
    if phase == "block":
        block, repeats = int(num("block") or 0), int(num("repeats") or 0)
        most, block_s, rate = int(num("max_repeats") or repeats), num("block_s"), num("rate")
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
        return f"{probe}{of}: {figure}{left}"
    if phase == "probe_done":  # harness.session.capacity, after each probe: its answer and where its time went
        outcome = {True: "fits", False: "does not fit", None: "failed"}[event.get("fits")]
        if event.get("fits") is False and event.get("status") not in ("oom", None):
            outcome += f" ({event['status']})"
        peak = num("peak_allocated_bytes")
        if event.get("fits") and peak:
            outcome += f", peak {peak / 2**30:.1f} GiB"
        seconds, parts = num("seconds"), event.get("phases_s") or {}
        names = (("process", "process start/exit"), ("open_device", "framework and device"),
                 ("prepare", "model and inputs"), ("steps", "steps"))
        split = ", ".join(f"{label} {parts[key]:.0f} s" for key, label in names
                          if isinstance(parts.get(key), (int, float)))
        took = f" in {seconds:.0f} s" if seconds is not None else ""
        return f"{probe}{outcome}{took}" + (f" ({split})" if split else "")
    return None


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


def capacity_searches_left(entries: list[dict], ok: list[tuple[str, int | None]]) -> tuple[list[dict], int]:
    """A capacity session's plan entries still to search (one per configuration with no ok capacity record:
    its probes are redone) and how many searches it planned."""

    keys = [capacity_key(RunSpec.from_dict(entry)) for entry in entries]
    left, seen = [], {key for key, _ in ok}
    for entry, key in zip(entries, keys):
        if key not in seen:
            seen.add(key)
            left.append(entry)
    return left, len(set(keys))


def work_left(entries: list[dict], ok: list[tuple[str, int | None]]) -> tuple[int, int, str]:
    """(left, planned, what) of a stored plan: capacity searches for a capacity session, else runs."""
    if any("capacity" in entry for entry in entries):
        left, total = capacity_searches_left(entries, ok)
        return len(left), total, "capacity search(es)"
    return sum(remaining_runs(entries, ok)), len(entries), "run(s)"


def _mark(store, session_id: str, state: str) -> bool:
    """Mark a session's end state; a store that cannot take it is reported, not raised."""

    try:
        store.end_session(session_id, state)
        return True
    except StoreError as exc:
        click.echo(f"warning: {exc} (the next harness run into this store marks it)", err=True)
        return False


# --------------------------------------------------------------------------- the plan, before it runs
def _load_filtered(path, overrides: list[str], limit: int, backends: list[str] | None, devices: list[str] | None):
    """The file's scenarios, its run limit checked on the runs --backend and --device leave.

    The scenario loader refuses a file whose runs exceed the limit before anything is expanded
    (hostile sweeps); with --backend/--device the file's own lists are replaced, so it is given the
    limit (at least the default one, which bounds what a file may expand to) scaled by how many
    backends and devices each document names beyond the chosen ones, and the plan itself is counted
    once built (`_too_many`).
    """

    scale = 1
    if backends or devices:
        for data in read_scenario_documents(path):
            if not isinstance(data, dict):
                continue
            named_b = data.get("backends") if isinstance(data.get("backends"), list) else ["torch", "tensorflow"]
            named_d = data.get("devices") if isinstance(data.get("devices"), list) else ["auto"]
            factor = 1
            if backends:
                factor *= max(1, math.ceil(len(named_b) / len(backends)))
            if devices:
                factor *= max(1, math.ceil(len(named_d) / len(devices)))
            scale = max(scale, factor)
    try:
        return load_scenarios(path, overrides, max_runs=limit if scale == 1 else max(limit, DEFAULT_MAX_RUNS) * scale)
    except InputError as exc:
        if scale > 1 and exc.field == "sweep" and "more than the limit" in str(exc):
            raise InputError(f"{path}: even the runs of {_chosen(backends, devices)} are more than "
                             f"{max(limit, DEFAULT_MAX_RUNS)} "
                             "(each configuration runs in measure.processes worker processes, 5 by default); narrow "
                             "the sweep, or lower --set measure.processes=N", source=str(path),
                             field="--max-runs") from None
        raise


def _written_for(scenarios: list, chosen: list[str] | None) -> tuple[list, list]:
    """(documents to run, documents skipped) under --backend: where some documents of the file name a chosen
    backend, those run and the others, written for other backends, are skipped (a file whose ResNet document
    trains torch eagerly and another trains TensorFlow through tf.function must not, under --backend tf, train
    TensorFlow eagerly); where none does (a file written for one framework), every document runs on the chosen."""
    if not chosen:
        return scenarios, []
    written = [s for s in scenarios if set(s.backends) & set(chosen)]
    if not written:
        return scenarios, []
    return written, [s for s in scenarios if s not in written]


def _chosen(backends, devices) -> str:
    parts = ([f"--backend {' '.join(backends)}"] if backends else []) + ([f"--device {' '.join(devices)}"] if devices else [])
    return " and ".join(parts) or "the file"


def _too_many(path, plan, limit: int, backends, devices) -> str:
    """Why a plan is refused: its runs, as configurations times processes, after the filters."""
    configurations = sum(1 for spec in plan if spec.replicate == 0)
    processes = sorted({int(spec.measure.get("processes") or 1) for spec in plan})
    each = "/".join(map(str, processes))
    return (f"{path}: the plan has {len(plan)} runs ({configurations} configuration(s) of {_chosen(backends, devices)}, "
            f"each in {each} worker process(es): measure.processes), more than --max-runs {limit}; allow it with "
            f"--max-runs {len(plan)}, or run fewer processes with --set measure.processes=N")


def capacity_settings(scenario, flags: dict, specs, runner) -> dict:
    """The capacity search's start, limit and resolution for a scenario's configurations: the file's
    `capacity:` block, overridden by --capacity-*; InputError (exit 2) before anything runs for a
    start no configuration can train at, or a limit below the start.

    A start the user chose (the flag, or the file's capacity.start) that a backend refuses to train
    at (torch's BatchNorm at batch 1) is refused, naming it and the reason. The default start (1)
    moves up to the smallest batch every configuration can train at, with a note.
    """
    from pydantic import ValidationError


    block = scenario.capacity
    settings = (block or Capacity()).model_dump()
    settings.update(flags)
    try:
        settings = Capacity.model_validate(settings).model_dump()
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error.get("loc") else "start"
        flag = f"--capacity-{key}" if key in flags else f"capacity.{key}"
        raise InputError(f"{flag} {settings.get(key)}: {error['msg']}", field=flag) from None

    def named(key: str) -> str:
        return f"--capacity-{key}" if key in flags else f"{scenario.name}: capacity.{key}"

    if settings["limit"] < settings["start"]:
        raise InputError(f"{named('limit')} {settings['limit']} is below the start, {settings['start']} "
                         f"({named('start')}): nothing to search", field=named("limit"))
    configs = {}
    for spec in specs:
        configs.setdefault(capacity_key(spec), spec)
    # a configuration that cannot run at all is recorded as such by its search; only the start is judged here
    judged = [spec for spec in configs.values() if runner.static_status(spec) is None]

    def refusals(n: int) -> list[tuple]:
        out = []
        for spec in judged:
            status = runner.static_status(spec.with_params(batch_size=n))
            if status is not None and status[0] == "unsupported":
                out.append((spec, status[1]))
        return out

    refused = refusals(settings["start"])
    if not refused:
        return settings
    chosen = "start" in flags or (block is not None and "start" in block.model_fields_set)
    spec, reason = refused[0]
    if chosen:
        raise InputError(f"{named('start')} {settings['start']}: {spec.backend} on {spec.device} cannot train "
                         f"{spec.workload} at batch_size={settings['start']}: {reason}; give a start it can train at",
                         field=named("start"))
    n = settings["start"]
    while refused and n < min(settings["limit"], settings["start"] + 64):  # a start a few batches up, or none
        n += 1
        refused = refusals(n)
    if refused:
        raise InputError(f"--find-max-batch: {spec.backend} on {spec.device} cannot train {spec.workload} at any "
                         f"batch_size from {settings['start']} to {n}: {reason}; give --capacity-start N",
                         field="--find-max-batch")
    click.echo(f"note: {scenario.name}: the capacity search starts at batch_size={n}, not {settings['start']}: "
               f"{spec.backend} on {spec.device}: {reason} (--capacity-start N chooses the start)", err=True)
    settings["start"] = n
    return settings


#: The CPU's rate assumed for the warning before a GPU-sized session runs on it, TFLOP/s (low, high).
CPU_TFLOPS = (0.1, 0.5)
#: Work (TFLOP) from which that warning is given: ten minutes at the low rate.
CPU_WARN_TFLOP = 60.0


def _say(lines: list[str]) -> None:
    for line in lines:
        click.echo(line, err=True)


def _stored_records(path) -> list[dict]:
    """The records of a store, for an estimate; none where there is no store or it cannot be read."""
    from pathlib import Path


    if not path or not Path(str(path)).exists():
        return []
    try:
        with Store(str(path), readonly=True) as store:
            return store.records()
    except (InputError, OSError):
        return []


def _records_of(store) -> list[dict]:
    try:
        return store.records()
    except (InputError, OSError):
        return []


def format_duration(seconds: float) -> str:
    """0.4 s, 45 s, 12 min, 2.3 h: how a person says how long something takes."""
    if seconds < 10:
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _duration_range(low: float, high: float) -> str:
    """`2.0-9.7 hours`: a range of durations in the unit of its high end."""
    if high < 90:
        return f"{low:.0f}-{high:.0f} seconds"
    if high < 90 * 60:
        return f"{low / 60:.0f}-{high / 60:.0f} minutes"
    return f"{low / 3600:.1f}-{high / 3600:.1f} hours"


def session_work_tflop(plan) -> float:
    """The plan's work in TFLOP: each run's FLOPs per step x (first step + warm-up + timed steps)."""

    total = 0.0
    for spec in plan:
        workload = WORKLOADS.get(spec.workload)
        if workload is None:
            continue
        try:
            flops = workload.flops_per_step(workload.validate(spec.params)) or 0.0
        except Exception:  # noqa: BLE001 - an estimate is never a reason to stop
            continue
        m = measure_settings(spec.measure)
        total += float(flops) * (1 + int(m["warmup"]) + int(m["steps"]) * int(m["repeats"]))
    return total / 1e12


def forecast(plan, records: list[dict], capacity_mode: bool = False) -> list[str]:
    """What to expect before a session starts: its time from earlier runs of the same
    configurations (their duration_s; nothing numeric without any), and a warning when a
    GPU-sized session is about to run on the CPU (no GPU visible, devices auto/cpu)."""

    lines = []
    if plan and not capacity_mode:
        seen: dict[str, list[float]] = {}
        for r in records:
            d = r.get("duration_s")
            if (r.get("run_key") and isinstance(d, (int, float)) and d > 0 and not r.get("probe_of")
                    and r.get("metric") != "max_batch_size"):
                seen.setdefault(r["run_key"], []).append(float(d))
        known = [stats.median(seen[spec.run_key]) for spec in plan if spec.run_key in seen]
        if known:
            earlier = sum(len(seen[k]) for k in {spec.run_key for spec in plan if spec.run_key in seen})
            if len(known) == len(plan):
                lines.append(f"estimate: about {format_duration(sum(known))} for {len(plan)} run(s), from {earlier} "
                             "earlier run(s) of the same configurations in this store")
            else:
                lines.append(f"estimate: about {format_duration(sum(known))} for the {len(known)} of {len(plan)} run(s) "
                             f"whose configuration ran before in this store (from {earlier} earlier run(s)); the other "
                             f"{len(plan) - len(known)} have no earlier run to go by")
    if plan and not capacity_mode and all(spec.device in ("auto", "cpu") for spec in plan) and not nvml.gpus():
        work = session_work_tflop(plan)
        if work >= CPU_WARN_TFLOP:
            low, high = CPU_TFLOPS
            lines.append(
                f"warning: no GPU is visible, so this session runs on the CPU: it does about {work:,.0f} TFLOP of work; at "
                f"about {low:g}-{high:g} TFLOP/s on this CPU that is {_duration_range(work / high, work / low)} (an "
                "estimate). The scenario is sized for a GPU; for a quick look on the CPU lower the work with --set "
                "(measure.processes=1, measure.steps, measure.repeats, smaller sizes), or stop now with Ctrl-C")
    return lines


class Resolution(click.ParamType):
    """--capacity-resolution: a number of images, or a share of the answer ("2%")."""

    name = "resolution"

    def convert(self, value, param, ctx):
        try:
            return parse_resolution(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


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
@click.option("--capacity-start", type=click.IntRange(min=1), default=None, metavar="N",
              help="--find-max-batch: the first batch_size probed (overrides the file's capacity.start; default 1, or "
                   "the smallest batch every configuration can train on).")
@click.option("--capacity-limit", type=click.IntRange(min=1), default=None, metavar="N",
              help="--find-max-batch: the largest batch_size probed (overrides capacity.limit; default 65536).")
@click.option("--capacity-resolution", type=Resolution(), default=None, metavar="N|P%",
              help="--find-max-batch: stop bisecting when the answer is known to within N images, or to within "
                   "P percent of it (e.g. 2%) (overrides capacity.resolution; default 1).")
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
@click.option("--quiet", "-q", is_flag=True, help="No per-run progress lines.")
@click.option("--wide", is_flag=True, help="The summary table with every column and note in full, however wide.")
def command(scenario_file, backends, devices, overrides, store_path, timeout, max_runs, dry_run, resume,
            find_max_batch, capacity_start, capacity_limit, capacity_resolution, memory_limit, quiet, wide) -> None:
    """Run SCENARIO_FILE (a path, or the name of a bundled scenario such as `quickstart`).

    Shows each run as it goes (on a terminal one live line: phase, rate so far, time left; else a
    line per first step and timed block); -q shows only warnings and the summary. Before a session
    it estimates its time from earlier runs of the same configurations in the store, and warns when
    a GPU-sized session is about to run on the CPU.
    """

    capacity_flags = {k: v for k, v in (("start", capacity_start), ("limit", capacity_limit),
                                         ("resolution", capacity_resolution)) if v is not None}
    with trap_signals():  # from the start: Ctrl-C at any moment ends cleanly, with the session marked
        try:
            _command(scenario_file, backends, devices, overrides, store_path, timeout, max_runs, dry_run, resume,
                     find_max_batch, memory_limit, quiet, capacity_flags, wide)
        except (Interrupted, KeyboardInterrupt) as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
            click.echo(f"interrupted by {signal.Signals(signum).name} before any run finished: nothing was run", err=True)
            sys.exit(128 + signum)


def _command(scenario_file, backends, devices, overrides, store_path, timeout, max_runs, dry_run, resume,
             find_max_batch, memory_limit, quiet, capacity_flags=None, wide=False) -> None:
    from pathlib import Path


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
                ok += [(r.run_key, r.replicate if isinstance(r.replicate, int) else None)
                       for r in kept if r.session_id == matches[0] and r.status == "ok" and r.run_id not in stored]
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
        for key, value in (capacity_flags or {}).items():  # a search resumes with the settings it began with
            flag = f"--capacity-{key}"
            if not capacity_mode:
                raise InputError(f"{flag} {value}: session {session_id} was not a capacity search; resume it without "
                                 "the option", field=flag)
            ran = sorted({entry["capacity"].get(key) for entry in entries if entry.get("capacity", {}).get(key)})
            if ran and ran != [value]:
                raise InputError(f"{flag} {value}: session {session_id} searched with {key} "
                                 f"{', '.join(map(str, ran))}, and its other searches are resumed alike (leave the "
                                 "option out, or start a new session)", field=flag)
        if capacity_mode:  # a search is done when its capacity record is ok; its probes are redone
            left, total = capacity_searches_left(entries, ok)
            groups = [(entry["capacity"], [RunSpec.from_dict({**entry, "run_id": new_id()})]) for entry in left]
            plan = [spec for _, specs in groups for spec in specs]
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
            _say(forecast(plan, _stored_records(path), capacity_mode))
            return
        store = Store(path)
        store.session(session_id)  # known to the store, for a side file
    else:
        path = resolve_scenario_path(scenario_file)
        chosen = None
        if backends and "all" not in [b.lower() for b in backends]:
            chosen = []
            for b in backends:
                name = resolve_backend_name(b, field="--backend")
                if name not in chosen:
                    chosen.append(name)
        chosen_devices = list(dict.fromkeys(normalize_device(d) for d in devices)) or None
        limit = max_runs or DEFAULT_MAX_RUNS
        scenarios = _load_filtered(path, list(overrides), limit, chosen, chosen_devices)
        scenarios, skipped = _written_for(scenarios, chosen)
        if skipped:
            click.echo(f"--backend {' '.join(chosen)}: runs the documents of {path} written for it; skipped "
                       + "; ".join(f"{s.name} (written for {', '.join(s.backends)})" for s in skipped), err=True)
        session_id = new_id()
        plans = [(s, build_plan(s, session_id, backends=chosen, devices=chosen_devices, timeout_s=timeout)) for s in scenarios]
        plan = [spec for _, specs in plans for spec in specs]
        if len(plan) > limit:  # counted after --backend and --device chose the runs
            raise InputError(_too_many(path, plan, limit, chosen, chosen_devices), field="--max-runs")
        capacity_mode = find_max_batch or any(s.capacity is not None for s in scenarios)
        if capacity_flags and not capacity_mode:
            flag = f"--capacity-{next(iter(capacity_flags))}"
            raise InputError(f"{flag}: only with --find-max-batch (or a scenario with a capacity: block)", field=flag)
        for s in scenarios:
            if capacity_mode and "batch_size" not in WORKLOADS[s.workload].params_model.model_fields:
                raise InputError(f"{path}: --find-max-batch: workload {s.workload} has no batch_size", field="--find-max-batch")
        # each group: the capacity search's settings (used only in capacity mode) and its specs
        groups = [(capacity_settings(s, capacity_flags or {}, specs, Runner(None)) if capacity_mode else {}, specs)
                  for s, specs in plans]
        if dry_run:
            click.echo(f"plan: {len(plan)} run(s), session {session_id} (dry run: nothing executed)")
            for i, spec in enumerate(plan, 1):
                click.echo(f"  {i:>3}. {spec.label()}")
            _say(forecast(plan, _stored_records(store_path or default_store_path()), capacity_mode))
            return
        store = Store(store_path)
        # a capacity session stores each spec's search settings, so --resume can redo the search
        entries = [{**spec.to_dict(), "capacity": settings} if capacity_mode else spec.to_dict()
                   for settings, specs in groups for spec in specs]
        # what shapes the runs beyond the plan itself, applied again by --resume
        session_settings = {"memory_limit_bytes": limit_bytes, "memory_limit": memory_limit, "timeout_s": timeout,
                            "find_max_batch": bool(find_max_batch), "backends": chosen, "devices": chosen_devices,
                            "overrides": list(overrides), "max_runs": max_runs,
                            **{f"capacity_{k}": v for k, v in (capacity_flags or {}).items()}}


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
    _finish(store, session_id, plan, outcome, wide)


def _run_session(store, session_id, plan, groups, capacity_mode, limit_bytes, quiet):
    """Execute the plan (or the capacity searches); every way it can end is in the outcome."""

    outcome = SessionOutcome()
    with trap_signals():
        try:
            for warning in environment_warnings():
                click.echo(f"warning: {warning}", err=True)
            click.echo(f"session {session_id}: {len(plan)} run(s); results go to {store.path}", err=True)
            _say(forecast(plan, _records_of(store), capacity_mode))
            shown = None if quiet else Progress()
            runner = Runner(store, on_start=shown and shown.start, on_result=shown and shown.result,
                            on_progress=shown and shown.progress, memory_limit_bytes=limit_bytes)
            if capacity_mode:
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


def _finish(store, session_id, plan, outcome, wide: bool = False) -> None:
    """Mark the session, say what happened and exit with its code."""

    resume_hint = f"harness run --resume {session_id} --store {shlex.quote(store.path)}"

    with trap_signals(signal.SIG_IGN):  # a second Ctrl-C does not stop the session from being marked
        if outcome.store_error is not None:
            _mark(store, session_id, "failed")
            store.close()
            if outcome.records:
                click.echo(summary_table(outcome.records, wide=wide))
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
            click.echo(summary_table(outcome.records, wide=wide))
            failed = [r for r in outcome.records if r.get("status") in FAILING_STATUSES]
            code = 0
            if failed:
                click.echo(f"{len(failed)} of {len(outcome.records)} run(s) did not succeed", err=True)
                code = 1
            elif outcome.records and not any(r.get("status") == "ok" for r in outcome.records):
                # every run an answer (unsupported), none a measurement: a CI job must not pass on that
                reasons = sorted({str(r.get("error") or r.get("status")).splitlines()[0][:150] for r in outcome.records})
                click.echo(f"no run was ok: all {len(outcome.records)} run(s) were {', '.join(sorted({str(r.get('status')) for r in outcome.records}))}, "
                           f"so nothing was measured (exit {EXIT_NOTHING_MEASURED}): {'; '.join(reasons[:3])}", err=True)
                code = EXIT_NOTHING_MEASURED
    if code:
        sys.exit(code)
