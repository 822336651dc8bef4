"""The parts of a session that grow with its number of runs, each measured directly at that number
(scripts/cluster_scale.py, parts queue and store): tasks queued in the real Slurm and polled as the executor
polls; records written and read back through the store and through the session's journal; the plan."""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from scale_e2e import write_scenario
from scale_machine import load, scratch_database
from store_load import sample_record

from harness.results.store import open_store
from harness.results.store.schema import stored_record
from harness.session.app import prepare_session
from harness.session.executors import queue
from harness.session.journal import Journal
from harness.session.request import SessionRequest

#: Passes of each timed squeue poll.
POLLS = 5


def _slurm_config() -> dict:
    """The controller's limits that bound a session: MaxArraySize, MaxJobCount, MinJobAge."""
    shown = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    wanted = ("MaxArraySize", "MaxJobCount", "MinJobAge")
    pairs = (line.partition("=") for line in shown.splitlines())
    return {key.strip(): value.strip() for key, _, value in pairs if key.strip() in wanted}


def _sbatch_held(first: int, last: int) -> tuple[str | None, str, float]:
    """(the array's id or None, what sbatch said on failing, seconds) for a held array of tasks first..last."""
    start = time.perf_counter()
    done = subprocess.run(["sbatch", "--parsable", "--hold", f"--array={first}-{last}", "--job-name=harness-scale",
                           "--output=/dev/null", "--wrap=true"], capture_output=True, text=True)
    took = time.perf_counter() - start
    return (done.stdout.strip() or None) if done.returncode == 0 else None, done.stderr.strip(), took


def queued(count: int) -> dict:
    """`count` tasks held in Slurm: one array of them tried first (what Slurm refuses), then arrays of the
    executor's size (1,000), polled POLLS times as the executor polls, then cancelled."""
    known = subprocess.run(["squeue", "--noheader", "--array", "--states=all", "--format=%i"], capture_output=True,
                           text=True).stdout.split()
    # every task counts against MaxJobCount, and so does every ended job Slurm still keeps (MinJobAge)
    figures: dict = {"tasks": count, "slurm_config": _slurm_config(), "jobs_known_before": len(known)}
    array, said, _ = _sbatch_held(0, count - 1)
    figures["one_array"] = {"accepted": array is not None, "sbatch_said": said}
    arrays: list[str] = [array] if array else []
    size = 1000
    try:
        if not arrays:
            submits = []
            for part in range(math.ceil(count / size)):
                got, said, took = _sbatch_held(0, min(size, count - part * size) - 1)
                if got is None:
                    figures["refused_after_arrays"] = {"arrays": len(arrays), "sbatch_said": said,
                                                       "sbatch_s": round(took, 1)}
                    break
                submits.append(took)
                arrays.append(got)
            figures["arrays"] = {"count": len(arrays), "size": size, "sbatch_s": _spread(submits)}
        job_ids = [line.split("|")[0] for line in _squeue(arrays)]
        figures["listed_tasks"] = len(job_ids)
        figures["polls"] = _polls(job_ids)
    finally:
        start = time.perf_counter()
        queue.cancel(arrays)
        figures["scancel_s"] = round(time.perf_counter() - start, 3)
    return figures


def _squeue(arrays: list[str]) -> list[str]:
    return subprocess.run(["squeue", "--noheader", "--array", f"--jobs={','.join(arrays)}", "--format=%i|%T"],
                          capture_output=True, text=True).stdout.split()


def _polls(job_ids: list[str]) -> list[dict]:
    """Each of POLLS calls of the executor's own poll (one squeue for the whole session): its seconds, how many
    tasks it listed, the load average beside it."""
    out = []
    for _ in range(POLLS):
        start = time.perf_counter()
        listed = queue.poll(job_ids)
        out.append({"seconds": round(time.perf_counter() - start, 3), "listed": len(listed.states or {}),
                    "error": listed.error, "load_average": load()})
        time.sleep(1)
    return out


def _spread(values: list[float], digits: int = 3) -> dict:
    """min, median and max of some timings."""
    if not values:
        return {}
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits),
            "max": round(max(values), digits)}


def plan_entries(count: int, folder: Path):
    """The plan of a `count`-run noop session as `harness run --executor slurm` makes it (its PlanEntry list),
    and the seconds it took."""
    from tests.noop_plugin import REGISTER

    os.environ.update(REGISTER)  # the registries read it at their first use
    write_scenario(folder / "plan.yaml", count)
    start = time.perf_counter()
    prepared = prepare_session(SessionRequest(scenario_file=str(folder / "plan.yaml"), max_runs=count,
                                              executor="slurm", store_path=str(folder / "unused.db")))
    return prepared.entries, time.perf_counter() - start


def _write_pass(url: str, entries, count: int) -> dict:
    """One pass: a session begun with the plan, `count` records added one transaction each, read back."""
    session_id = f"scale-{uuid.uuid4().hex[:8]}"
    template = sample_record(session_id)
    with open_store(url) as store:
        begun = time.perf_counter()
        store.begin_session(session_id, entries, scenario_path=None, command="cluster_scale")
        begun = time.perf_counter() - begun
        before = load()
        latencies = []
        for _ in range(count):
            record = template.updated(run_id=uuid.uuid4().hex)
            start = time.perf_counter()
            store.add(record)
            latencies.append(time.perf_counter() - start)
        wall = sum(latencies)
        after = load()
        read = time.perf_counter()
        back = store.records([session_id])
        read = time.perf_counter() - read
        session = time.perf_counter()
        plan_back = store.session(session_id).plan
        session = time.perf_counter() - session
        size = store._read("SELECT pg_total_relation_size('results')")[0][0]
    latencies.sort()
    return {"session_id": session_id, "records": count, "records_per_s": round(count / wall, 1),
            "latency_ms_median": round(statistics.median(latencies) * 1000, 2),
            "latency_ms_p99": round(latencies[int(count * 0.99) - 1] * 1000, 2),
            "load_average_before": before, "load_average_after": after, "read_back_records": len(back),
            "read_back_s": round(read, 3), "results_bytes": int(size), "begin_session_s": round(begun, 3),
            "session_read_back_s": round(session, 3), "plan_read_back_entries": len(plan_back)}


def _journal(url: str, session_id: str, count: int) -> dict:
    """The session's journal of a store that holds `count` records of `session_id` (the last pass's): one add
    timed with 0, count/10, count/2 and count results held before it (the journal rewrites every result and
    the session's plan at each add), then the read-back that ends it (`settle`)."""
    figures: dict = {"adds": []}
    with open_store(url) as store:
        rows = [stored_record(r) for r in store.results([session_id])]
        journal = Journal(store, store.session(session_id))
        template = sample_record(session_id)
        added: list[dict] = []
        for held in sorted({0, count // 10, count // 2, count}):
            took = []
            for _ in range(3):
                journal._kept.records = rows[:held]  # as if this session had added `held` results before
                journal._kept.write()  # ...and written them: the file holds them before the add is timed
                start = time.perf_counter()
                journal.add(template.updated(run_id=uuid.uuid4().hex))
                took.append(time.perf_counter() - start)
                added.append(journal._kept.records[-1])
            figures["adds"].append({"held": held, "add_s": _spread(took), "file_bytes": os.path.getsize(journal.file),
                                    "load_average": load()})
        journal._kept.records = rows + added
        start = time.perf_counter()
        error = journal.settle("finished", None)
        figures["settle_s"] = round(time.perf_counter() - start, 3)
        figures["settle_records"] = len(journal.run_ids)
        figures["settled_clean"] = error is None and not os.path.exists(journal.file or "")
    return figures


def store_passes(url: str, count: int, passes: int) -> dict:
    """The plan of a `count`-run session, then `passes` passes of `count` records through the store (each in a
    fresh database), the last one's records then through the journal."""
    # in a scratch working folder: the journal goes there, as for `harness run`
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp, contextlib.chdir(tmp):
        entries, planned_s = plan_entries(count, Path(tmp))
        text = json.dumps([e.to_dict() for e in entries], default=str)
        figures: dict = {"plan": {"runs": len(entries), "json_bytes": len(text.encode()),
                                  "planned_s": round(planned_s, 2)},
                         "record_json_bytes": len(json.dumps(stored_record(sample_record("x")), default=str)),
                         "passes": []}
        for index in range(passes):
            with scratch_database(url, "store") as db_url:
                figures["passes"].append(_write_pass(db_url, entries, count))
                if index == passes - 1:
                    figures["journal"] = _journal(db_url, figures["passes"][-1]["session_id"], count)
    return figures


def _held_journal(store, session, count: int) -> tuple[Journal, object, float]:
    """The session's journal holding `count` results (copies of up to 1,000 records of a real size), written
    once, untimed by the add that follows, as it would be after `count` adds: (the journal, the record template
    of further adds, the seconds that whole write took)."""
    journal = Journal(store, session)
    template = sample_record(session.session_id)
    some = [stored_record(template.updated(run_id=uuid.uuid4().hex)) for _ in range(min(count, 1000))]
    journal._kept.records = some * (count // len(some)) if some else []
    start = time.perf_counter()
    journal._kept.write()
    return journal, template, time.perf_counter() - start


def large_session(url: str, count: int) -> dict:
    """What a `count`-run session's plan and journal cost where no run is made: the plan built, begun in the
    store and read back (as --resume reads it); one journal add with `count` results held before it (copies of
    1,000 records of a real size); this process's peak RSS."""
    import resource

    with tempfile.TemporaryDirectory(prefix="scale-") as tmp, contextlib.chdir(tmp):
        entries, planned_s = plan_entries(count, Path(tmp))
        session_id = f"scale-{uuid.uuid4().hex[:8]}"
        with scratch_database(url, "large") as db_url, open_store(db_url) as store:
            begun = time.perf_counter()
            store.begin_session(session_id, entries, scenario_path=None, command="cluster_scale")
            begun = time.perf_counter() - begun
            read = time.perf_counter()
            session = store.session(session_id)
            read = time.perf_counter() - read
            journal, template, _ = _held_journal(store, session, count)
            start = time.perf_counter()
            journal.add(template.updated(run_id=uuid.uuid4().hex))
            added = time.perf_counter() - start
            size = os.path.getsize(journal.file)
            os.unlink(journal.file)
    return {"runs": len(entries), "planned_s": round(planned_s, 1), "begin_session_s": round(begun, 2),
            "session_read_back_s": round(read, 2), "journal_add_s": round(added, 2), "journal_file_bytes": size,
            "load_average": load(), "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def journal_growth(url: str, counts: list[int], adds: int) -> dict:
    """One journal add timed with `count` results held before it, for each count, in a session whose plan has
    `count` runs (its first line holds that plan): `adds` adds in a row, each timed, after one untimed write of
    the held results (the file holds them, as it would after `count` adds)."""
    figures: dict = {"adds": []}
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp, contextlib.chdir(tmp):
        for count in counts:
            entries, _ = plan_entries(count, Path(tmp))
            session_id = f"scale-{uuid.uuid4().hex[:8]}"
            with scratch_database(url, "journal") as db_url, open_store(db_url) as store:
                store.begin_session(session_id, entries, scenario_path=None, command="cluster_scale")
                journal, template, whole = _held_journal(store, store.session(session_id), count)
                took = []
                for _ in range(adds):
                    start = time.perf_counter()
                    journal.add(template.updated(run_id=uuid.uuid4().hex))
                    took.append(time.perf_counter() - start)
                figures["adds"].append({"held": count, "plan_runs": len(entries), "add_s": _spread(took),
                                        "whole_write_s": round(whole, 3), "file_bytes": os.path.getsize(journal.file),
                                        "load_average": load()})
                os.unlink(journal.file)
    return figures
