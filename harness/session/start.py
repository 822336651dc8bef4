"""Starting a session: a scenario file's runs, chosen by --backend and --device, planned and counted, and for
a capacity search each configuration's search settings; nothing is written."""

from __future__ import annotations

import math
import shlex
from typing import Callable

from harness.errors import InputError
from harness.machine.devices import normalize_device
from harness.results.sessions import PlanEntry, SessionSettings
from harness.results.store import default_store_path
from harness.scenario.bundled import resolve_scenario_path
from harness.scenario.load import DEFAULT_MAX_RUNS, load_scenarios
from harness.scenario.reading import read_scenario_documents
from harness.seam.backend import resolve_backend_name
from harness.session.capacity_settings import capacity_settings
from harness.session.plan import build_plan, new_id
from harness.session.request import PreparedSession, SessionRequest
from harness.session.rounds import AdaptiveRounds
from harness.session.runner import Runner
from harness.workloads import WORKLOADS


def chosen_backends(backends) -> list[str] | None:
    """The backends --backend names, resolved and without repeats (None: every backend of the file)."""
    if not backends or "all" in [b.lower() for b in backends]:
        return None
    chosen: list[str] = []
    for b in backends:
        name = resolve_backend_name(b, field="--backend")
        if name not in chosen:
            chosen.append(name)
    return chosen


def _chosen(backends, devices) -> str:
    parts = ([f"--backend {' '.join(backends)}"] if backends else []) + ([f"--device {' '.join(devices)}"] if devices else [])
    return " and ".join(parts) or "the file"


def _scale(path, backends: list[str] | None, devices: list[str] | None) -> int:
    """How many times more runs a document may expand to before --backend and --device choose among them: the
    backends and devices it names, over the chosen ones."""
    scale = 1
    if not (backends or devices):
        return scale
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
    return scale


def load_filtered(path, overrides: list[str], limit: int, backends: list[str] | None, devices: list[str] | None,
                  documents: tuple[str, ...] = ()):
    """The file's scenarios, its run limit checked on the runs --backend and --device leave.

    The scenario loader refuses a file whose runs exceed the limit before anything is expanded
    (hostile sweeps); with --backend/--device the file's own lists are replaced, so it is given the
    limit (at least the default one, which bounds what a file may expand to) scaled by how many
    backends and devices each document names beyond the chosen ones, and the plan itself is counted
    once built (`too_many`).
    """
    scale = _scale(path, backends, devices)
    try:
        return load_scenarios(path, overrides, max_runs=limit if scale == 1 else max(limit, DEFAULT_MAX_RUNS) * scale,
                              documents=documents)
    except InputError as exc:
        if scale > 1 and exc.field == "sweep" and "more than the limit" in str(exc):
            raise InputError(f"{path}: even the runs of {_chosen(backends, devices)} are more than "
                             f"{max(limit, DEFAULT_MAX_RUNS)} "
                             "(each configuration runs in measure.processes worker processes, at least 4 under the default auto); "
                             "narrow "
                             "the sweep, or lower --set measure.processes=N", source=str(path),
                             field="--max-runs") from None
        raise


def written_for(scenarios: list, chosen: list[str] | None) -> tuple[list, list]:
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


def too_many(path, plan, limit: int, backends, devices) -> str:
    """Why a plan is refused: its runs, as configurations times processes, after the filters."""
    configurations = sum(1 for spec in plan if spec.replicate == 0)
    processes = sorted({str(spec.measure.processes) for spec in plan})
    each = "/".join(map(str, processes))
    return (f"{path}: the plan has {len(plan)} runs ({configurations} configuration(s) of {_chosen(backends, devices)}, "
            f"each in {each} worker process(es): measure.processes; for auto, its least), more than --max-runs {limit}; allow it with "
            f"--max-runs {len(plan)}, or run fewer processes with --set measure.processes=N")


def _capacity_mode(request: SessionRequest, path, scenarios) -> bool:
    """Whether the session is a capacity search (InputError for --capacity-* without one, or a workload
    without a batch_size to search)."""
    capacity_mode = request.find_max_batch or any(s.capacity is not None for s in scenarios)
    if request.capacity and not capacity_mode:
        flag = f"--capacity-{next(iter(request.capacity))}"
        raise InputError(f"{flag}: only with --find-max-batch (or a scenario with a capacity: block)", field=flag)
    for s in scenarios:
        if capacity_mode and "batch_size" not in WORKLOADS[s.workload].params_model.model_fields:
            raise InputError(f"{path}: --find-max-batch: workload {s.workload} has no batch_size", field="--find-max-batch")
    return capacity_mode


def prepare_start(request: SessionRequest, limit_bytes: int | None, notice: Callable[[str], None]) -> PreparedSession:
    """A new session from `request.scenario_file`: its plan, counted against --max-runs, and for a capacity
    search each scenario's search settings (InputError for anything wrong); notes go to `notice`."""
    path = resolve_scenario_path(request.scenario_file)
    chosen = chosen_backends(request.backends)
    devices = list(dict.fromkeys(normalize_device(d) for d in request.devices)) or None
    limit = request.max_runs or DEFAULT_MAX_RUNS
    loaded = load_filtered(path, list(request.overrides), limit, chosen, devices, request.documents)
    scenarios, skipped = written_for(loaded, chosen)
    if skipped:
        notice(f"--backend {' '.join(chosen)}: runs the documents of {path} written for it; skipped "
               + "; ".join(f"{s.name} (written for {', '.join(s.backends)})" for s in skipped))
    session_id = new_id()
    plans = [(s, build_plan(s, session_id, backends=chosen, devices=devices, timeout_s=request.timeout))
             for s in scenarios]
    plan = [spec for _, specs in plans for spec in specs]
    if len(plan) > limit:  # counted after --backend and --device chose the runs
        raise InputError(too_many(path, plan, limit, chosen, devices), field="--max-runs")
    capacity_mode = _capacity_mode(request, path, scenarios)
    # each group: the capacity search's settings (a capacity session's only) and its specs
    groups = [(capacity_settings(s, request.capacity, specs, Runner(None), notice) if capacity_mode else None, specs)
              for s, specs in plans]
    # a capacity session stores each spec's search settings, so --resume can redo the search
    entries = [PlanEntry(spec, search) for search, specs in groups for spec in specs]
    # what shapes the runs beyond the plan itself, applied again by --resume
    settings = SessionSettings(
        memory_limit_bytes=limit_bytes, memory_limit=request.memory_limit, timeout_s=request.timeout,
        find_max_batch=bool(request.find_max_batch), backends=chosen, devices=devices,
        overrides=list(request.overrides), max_runs=request.max_runs, documents=list(request.documents),
        **{f"capacity_{k}": v for k, v in request.capacity.items()})
    return PreparedSession(request=request, session_id=session_id, plan=plan, groups=groups,
                           capacity_mode=capacity_mode, store_path=default_store_path(request.store_path),
                           memory_limit_bytes=limit_bytes,
                           scenario_path=str(path), entries=entries, settings=settings,
                           command=request.command or shlex.join(["harness", "run", str(request.scenario_file)]),
                           rounds=None if capacity_mode else AdaptiveRounds.of(plan, planned=len(plan), limit=limit))
