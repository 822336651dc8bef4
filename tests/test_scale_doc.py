"""docs/distributed.md's "How far it goes" says only what scripts/cluster_scale.py measured: every figure in it is
recomputed here from the JSON file it names, and every number in it is one of those figures (or a setting or
version named below), so the account cannot drift from the measurement or gain a figure nobody measured."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "distributed.md"

#: Numbers in the section that are not measurements: the executor's settings it names (poll_s 2, array_size
#: 1,000, parallel 256), the services' versions (Slurm 22.05, PostgreSQL 15, psycopg 3.3) and the
#: counts the section is about.
NOT_MEASURED = {"2", "1,000", "256", "22.05", "15", "3.3", "10,000", "100,000"}


def section() -> str:
    """The text of "### How far it goes", up to the next heading."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("### How far it goes")
    end = text.find("\n#", start + 10)
    return text[start:end if end != -1 else None]


def data() -> dict:
    """The JSON file the section names (docs/data/cluster-scale-*.json)."""
    name = re.search(r"docs/data/(cluster-scale-[\d-]+\.json)", section()).group(1)
    return json.loads((ROOT / "docs" / "data" / name).read_text(encoding="utf-8"))


def _n(x: float) -> str:
    return f"{round(x):,}"


def _mb(b: float) -> str:
    return f"{b / 1e6:.1f} MB"


def _kb(b: float) -> str:
    return f"{b / 1e3:.1f} kB"


def _s(x: float, digits: int = 1) -> str:
    return f"{x:.{digits}f} s"


def _span(values, fmt) -> str:
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low} to {high}"


def _load(values) -> str:
    return "load average " + _span(values, lambda x: f"{x:.1f}")


def _unit(values, fmt, unit: str) -> str:
    return f"{_span(values, fmt)} {unit}"


def end_to_end(e: dict) -> dict:
    """The figures of the 1,000-run sessions (part e2e, each time it was measured): ranges over them."""
    runs = [e, *e.get("earlier", [])]
    every = lambda key: [run[key] for run in runs]  # noqa: E731
    squeue = [run["calls"]["squeue"] for run in runs]
    one = lambda x: f"{x:.1f}"  # noqa: E731
    return {
        "runs": f"{_n(e['runs'])} runs", "ok": f"all {_n(e['statuses']['ok'])} `ok`", "times": f"{len(runs)} sessions",
        "all_ok": f"{_span([run['statuses'].get('ok', 0) for run in runs], _n)} `ok`",
        "wall": _unit([w / 60 for w in every("wall_s")], one, "min"),
        "per_minute": _unit([run["runs"] / (run["wall_s"] / 60) for run in runs], _n, "runs a minute"),
        "submitted": f"submitted in {_unit(every('submitted_s'), one, 's')}",
        "first": f"first result stored at {_unit(every('first_stored_s'), one, 's')}",
        "each": ", ".join(f"{_n(run['runs'] / (run['wall_s'] / 60))} at "
                          + _load([sample[0] for sample in run["load_average_samples"]])
                          for run in sorted(runs, key=lambda r: r["wall_s"])),
        "cpu": f"{_unit(every('submitter_cpu_s'), _n, 's')} of CPU",
        "rss": _unit([b / 1e6 for b in every("submitter_peak_rss_bytes")], _n, "MB"),
        "squeue": f"squeue {_span([c['calls'] for c in squeue], _n)} times "
                  f"({_span([c['per_minute'] for c in squeue], one)} a minute",
        "poll": f"one poll every {_unit([run['wall_s'] / run['calls']['squeue']['calls'] for run in runs], one, 's')}",
        "sacct": f"sacct {_span([run['calls']['sacct']['calls'] for run in runs], _n)} times",
        "sbatch": f"sbatch {_span([run['calls']['sbatch']['calls'] for run in runs], _n)} time",
        "rows": f"{_n(e['results_rows'])} result rows and {_n(e['sessions_rows'])} session row",
        "db": f"{_unit([b / 1e6 for b in every('database_bytes')], one, 'MB')} in all",
        "results": f"results {_unit([b / 1e6 for b in every('results_bytes')], one, 'MB')}",
        "per_row": _unit([run["results_bytes"] / run["results_rows"] / 1e3 for run in runs], one, "kB a row"),
        "plan": f"{_kb(e['plan_text_bytes'])} of JSON, {_kb(e['plan_stored_bytes'])} as stored",
    }


def queued(q: dict) -> dict:
    """The figures of the held tasks (part queue)."""
    config = q["slurm_config"]
    polls = q["polls"]
    out = {
        "config": f"MaxArraySize {_n(int(config['MaxArraySize']))}, MaxJobCount {_n(int(config['MaxJobCount']))}, "
                  f"MinJobAge {config['MinJobAge'].split()[0]} s",
        "refused": q["one_array"]["sbatch_said"].split("failed: ")[-1],
        "arrays": f"{_n(q['arrays']['count'])} held arrays", "listed": f"{_n(q['listed_tasks'])} tasks",
        "poll": f"{_span([p['seconds'] for p in polls], lambda x: f'{x:.2f}')} s",
        "poll_load": _load([p["load_average"][0] for p in polls]),
    }
    if "refused_after_arrays" in q:
        refused = q["refused_after_arrays"]
        out["full_said"] = refused["sbatch_said"].splitlines()[-1].split("failed: ")[-1]
        out["full_s"] = f"{_n(refused['sbatch_s'])} s"
        out["known"] = f"{_n(q['jobs_known_before'])} jobs"
    return out


def held(h: dict) -> dict:
    """The figures of the session submitted held through `harness run` (part held): the last measurement, and the
    first, taken before the submitter handled sbatch's refusal (its exit and what it left queued)."""
    failed, submitted = map(int, re.search(r"(\d+) run\(s\) are recorded failed.*the (\d+) submitted", h["said"]).groups())
    assert not h["traceback"] and h["calls"]["scancel"]["calls"] >= 1
    before = next(e for e in h.get("earlier", []) if "exit_code" in e)
    return {"runs": f"{_n(h['runs'])}-run session", "known": f"{_n(h['jobs_known_before'])} jobs known",
            "arrays": f"{_n(h['arrays_submitted'])} arrays submitted", "refused": f"after {_s(h['refused_after_s'])}",
            "said": h["said"].split("(sbatch: error: ")[1].split(")")[0], "failed": f"those {_n(failed)} runs",
            "submitted": f"the {_n(submitted)} submitted", "exit": f"exited {h['exit_code_after_sigterm']}",
            "left": f"left {_n(h['tasks_left_queued'])} queued tasks",
            "before_exit": f"exit {before['exit_code']} after {_s(before['wall_s'])}",
            "before_left": f"its {_n(before['tasks_left_queued'])} queued tasks"}


def _passes(store: dict) -> list[dict]:
    return [p for run in [store, *store.get("earlier", [])] for p in run["passes"]]


def stored(st: dict) -> dict:
    """The figures of the records through the store and the journal (part store)."""
    passes = _passes(st)
    adds = {a["held"]: a for a in st["journal"]["adds"]}
    runs = [run["journal"]["adds"] for run in [st, *st.get("earlier", [])]]
    medians = {held: [a["add_s"]["median"] for run in runs for a in run if a["held"] == held] for held in adds}
    return {
        "plan": f"{_mb(st['plan']['json_bytes'])} of JSON", "plan_run": f"{_n(st['plan']['json_bytes'] / 1e4)} bytes a run",
        "record": f"{_kb(st['record_json_bytes'])} of JSON", "passes": f"{len(passes)} passes",
        "rate": f"{_span([p['records_per_s'] for p in passes], _n)} records a second",
        "rate_load": _load([x for p in passes for x in (p["load_average_before"][0], p["load_average_after"][0])]),
        "median": f"{_span([p['latency_ms_median'] for p in passes], lambda x: f'{x:.1f}')} ms",
        "p99": f"{_span([p['latency_ms_p99'] for p in passes], lambda x: f'{x:.0f}')} ms",
        "read": f"read back in {_span([p['read_back_s'] for p in passes], lambda x: f'{x:.1f}')} s",
        "size": f"{_span([p['results_bytes'] for p in passes], lambda b: f'{b / 1e6:.0f}')} MB",
        "begin": f"{_span([p['begin_session_s'] for p in passes], lambda x: f'{x:.1f}')} s",
        "resume": f"{_span([p['session_read_back_s'] for p in passes], lambda x: f'{x:.1f}')} s",
        "add0": f"{_span(medians[0], lambda x: f'{x:.2f}')} s",
        "add_last": f"{_span(medians[10_000], lambda x: f'{x:.2f}')} s",
        "file0": _mb(adds[0]["file_bytes"]), "file_last": _mb(adds[10_000]["file_bytes"]),
        "journal_load": _load([a["load_average"][0] for run in runs for a in run]),
        "journal_runs": f"{len(runs)} measurements",
    }


def large(big: dict) -> dict:
    """The figures of the 100,000-run plan and journal (part large)."""
    return {"planned": _s(big["planned_s"]), "begin": _s(big["begin_session_s"]),
            "resume": _s(big["session_read_back_s"]), "add": _s(big["journal_add_s"]),
            "file": f"{_n(big['journal_file_bytes'] / 1e6)} MB", "rss": f"{big['peak_rss_bytes'] / 1e9:.1f} GB",
            "load": _load([big["load_average"][0]])}


def appended(j: dict) -> dict:
    """The figures of the journal adds, appended, with 10,000 and 100,000 results held (part journal)."""
    adds = [a for run in [j, *j.get("earlier", [])] for a in run["adds"]]

    def at(held: int, key: str) -> list:
        return [a[key]["median"] if key == "add_s" else a[key] for a in adds if a["held"] == held]

    ms = lambda x: f"{x * 1000:.0f}"  # noqa: E731
    return {"add_10k": f"{_span(at(10_000, 'add_s'), ms)} ms", "add_100k": f"{_span(at(100_000, 'add_s'), ms)} ms",
            "whole_10k": f"{_span(at(10_000, 'whole_write_s'), lambda x: f'{x:.1f}')} s",
            "whole_100k": f"{_span(at(100_000, 'whole_write_s'), lambda x: f'{x:.1f}')} s",
            "file_10k": f"{_span(at(10_000, 'file_bytes'), lambda b: _n(b / 1e6))} MB",
            "file_100k": f"{_span(at(100_000, 'file_bytes'), lambda b: _n(b / 1e6))} MB",
            "load": _load([a["load_average"][0] for a in adds]),
            "runs": f"{len([j, *j.get('earlier', [])])} measurements"}


def figures() -> dict:
    """Every figure the section states, as it states it, keyed by part."""
    d = data()
    return {"e2e": end_to_end(d["e2e"]), "queue": queued(d["queue"]), "held": held(d["held"]), "store": stored(d["store"]),
            "large": large(d["large"]), "journal": appended(d["journal"])}


def test_every_figure_of_the_account_is_recomputed_from_the_measurement():
    text = " ".join(section().split())
    missing = [f"{part}.{key}: {value!r}" for part, found in figures().items() for key, value in found.items()
               if value not in text]
    assert not missing, "figures the section does not state as measured:\n" + "\n".join(missing)


def test_the_account_holds_no_number_that_was_not_measured():
    text = " ".join(section().split())
    stated = " ".join(value for found in figures().values() for value in found.values())
    number = re.compile(r"(?<![A-Za-z\d])(?:\d[\d,.]*\d|\d)")  # p99 is a name, not a number
    measured = set(number.findall(stated)) | NOT_MEASURED
    prose = re.sub(r"docs/data/\S+|`[^`]*`", "", text)  # the file's name and commands are not figures
    unknown = sorted(set(number.findall(prose)) - measured)
    assert not unknown, f"numbers in the section that no measurement gives: {unknown}"


def test_the_measurement_names_its_machine_and_versions():
    d = data()
    for part in ("e2e", "held", "queue", "store", "large", "journal"):
        machine = d[part]["machine_at_start"]
        assert machine["cores"] and machine["load_average"] and machine["commit"]
        assert machine["slurm"].startswith("slurm") and machine["postgresql"] and machine["psycopg"]
