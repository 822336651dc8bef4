"""Tables that fit the terminal: `results`, `compare` and the run summary respect COLUMNS,
move what every row shares to a line above the table, shorten notes, keep integers integers, show
the session and the image size, list the sessions, and say `n/a` for a one-sample CI."""

import json

from click.testing import CliRunner

from harness.cli import main
from harness.present.cells import cell
from harness.present.fitting import fit, terminal_width
from harness.present.table import results_text
from harness.results.record import Result
from harness.results.store import open_store
from tests.specs import planned

LONG_NOTE = ("CV 12.3% exceeds 5%: spread too wide to trust; busy machine: load average 3.1 exceeds the 2 cores; "
             "rate fell 33% from the first to the last timed block")


def _record(run_id, *, session="s1", backend="torch", size=1024, median=0.5, samples=(0.49, 0.5, 0.51), **extra):
    params = {"size": size, "batch": 1, "precision": "fp32", "execution": "eager"}
    if size is None:
        params = {"batch_size": 32, "image_size": extra.pop("image_size", 224), "precision": "fp32"}
    base = {"schema_version": 1, "run_id": run_id, "session_id": session, "run_key": f"k-{backend}",
            "scenario": "quickstart", "workload": "gemm" if size is not None else "resnet50_train",
            "backend": backend, "device": "cpu", "device_name": "AMD EPYC", "params": params, "options": {},
            "status": "ok", "metric": "tflops", "unit": "TFLOP/s", "median": median, "ci_low": median and median * 0.9,
            "ci_high": median and median * 1.1, "cv": 0.02, "samples": list(samples), "step_time_s": 0.03, "first_step_s": 0.05,
            "peak_allocated_bytes": None, "host_peak_rss_bytes": 600 * 2**20, "warnings": [LONG_NOTE], "env": {},
            "started_at": f"2026-11-30T00:00:{len(run_id):02d}", "duration_s": 4.0}
    return {**base, **extra}


def _result(run_id, **fields) -> Result:
    """The record as the store gives it back: a Result."""
    return Result.from_dict(_record(run_id, **fields))


def _store(path, records, sessions=()):
    with open_store(path) as store:
        for sid, command in sessions:
            store.begin_session(sid, [planned("k")] * 2, scenario_path="scenarios/quickstart.yaml", command=command)
            store.end_session(sid, "finished")
        for r in records:
            store.add(Result.from_dict(r))
    return str(path)


def _invoke(*args, columns=None):
    env = {"COLUMNS": str(columns)} if columns else {}
    result = CliRunner().invoke(main, [str(a) for a in args], env=env)
    assert "Traceback" not in result.output, result.output
    return result


# ------------------------------------------------------------------------------------------- cells
def test_integers_stay_integers_even_where_pandas_made_them_float():
    assert cell(1024) == "1024" and cell(1024.0) == "1024" and cell(65536.0) == "65536"
    assert cell(0.04771) == "0.04771" and cell(float("nan")) == "-" and cell(None) == "-"
    import numpy as np
    import pandas as pd

    assert cell(np.int64(7)) == "7" and cell(np.float64(224.0)) == "224" and cell(pd.NA) == "-"
    # a column mixing a number and a missing value is float in pandas: still shown as an integer
    records = [_result("a", size=1024), _result("bb", size=None)]
    text = results_text(records, width=200)
    assert "1024" in text and "1024.0" not in text and "224.0" not in text


# --------------------------------------------------------------------------------- fitting a width
def test_every_line_fits_the_width_and_what_every_row_shares_moves_above_the_table():
    records = [_result(f"r{i}", backend=b, median=0.1 * (i + 1)) for i, b in enumerate(["torch", "tensorflow"] * 3)]
    for width in (80, 100, 140):
        text = results_text(records, width=width)
        assert all(len(line) <= width for line in text.splitlines()), (width, text)
        head = text.split("backend")[0]
        assert head.startswith("every row: ") and "session=s1" in head and "size=1024" in head and "device=cpu" in head
        table = text.splitlines()
        assert any(line.startswith("backend") for line in table)
        # the long note is said whole under the table (every row has it: no mark), never cut
        assert "..." not in text and "every row: CV 12.3% exceeds 5%" in text and " [1]" not in text
    narrow = results_text(records, width=80)
    header = next(line for line in narrow.splitlines() if line.startswith("backend"))
    assert "median [95% CI]" in header and "cv" in header  # a footnoted note takes no figure's room


def test_wide_prints_every_column_and_note_in_full():
    records = [_result(f"r{i}", backend=b) for i, b in enumerate(["torch", "tensorflow"])]
    text = results_text(records, width=80, wide=True)
    assert LONG_NOTE in text and "every row" not in text
    header = text.splitlines()[0]
    for column in ("session", "scenario", "workload", "device", "size", "status", "host rss", "notes"):
        assert column in header, column


def test_session_and_image_size_are_columns_when_they_vary_and_said_once_when_not():
    records = [_result("a", session="s-one", size=None, image_size=32),
               _result("bb", session="s-two", size=None, image_size=224)]
    text = results_text(records, width=250)
    header = next(line for line in text.splitlines() if line.startswith("session"))
    assert "image_size" in header
    assert any(line.startswith("s-one") and " 32 " in line for line in text.splitlines())
    same = results_text([_result("a", size=None, image_size=32), _result("bb", size=None, image_size=32)], width=250)
    assert "image_size=32" in same.splitlines()[0] and "session=s1" in same


def test_the_terminal_width_comes_from_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "64")
    assert terminal_width() == 64
    fitted = fit([{"a": "x" * 10, "notes": "y" * 200}, {"a": "z", "notes": "w" * 200}])
    assert fitted.width == 64 and all(len(line) <= 64 for line in fitted.text.splitlines())
    assert fitted.shortened == ["notes"]


def test_a_one_sample_figure_has_no_interval():
    one = _result("a", median=2.08, samples=[2.08], ci_low=2.08, ci_high=2.08)
    text = results_text([one], width=200)
    assert "2.08 [n/a]" in text and "[2.08, 2.08]" not in text
    many = _result("bb", median=2.08, samples=[2.0, 2.08, 2.1], ci_low=2.0, ci_high=2.1)
    assert "2.08 [2, 2.1]" in results_text([many], width=200)


# ------------------------------------------------------------------------------------- the commands
def test_results_fit_columns_and_wide_shows_everything(tmp_path):
    path = _store(tmp_path / "r.db", [_record("a"), _record("bb", backend="tensorflow")])
    result = _invoke("results", "--store", path, columns=90)
    assert result.exit_code == 0, result.output
    assert all(len(line) <= 90 for line in result.output.splitlines())
    assert LONG_NOTE not in result.output and "every row:" in result.output
    wide = _invoke("results", "--store", path, "--wide", columns=90)
    assert wide.exit_code == 0 and LONG_NOTE in wide.output


def test_results_sessions_lists_each_session_and_an_unknown_session_exits_2_naming_them(tmp_path):
    path = _store(tmp_path / "s.db", [_record("a", session="aaaa1111"), _record("aa", session="aaaa1111", duration_s=200.0),
                                      _record("bb", session="bbbb2222", status="failed", median=None, error="boom")],
                  sessions=[("aaaa1111", "harness run quickstart --store s.db"),
                            ("bbbb2222", "harness run gemm --backend torch")])
    result = _invoke("results", "--store", path, "--sessions", columns=200)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:3] == ["session", "started", "(UTC)"] and "status" in lines[0] and "command" in lines[0]
    assert lines[1].startswith("aaaa1111") and "finished" in lines[1] and "harness run quickstart --store s.db" in lines[1]
    assert lines[2].startswith("bbbb2222") and "harness run gemm --backend torch" in lines[2]
    as_json = json.loads(_invoke("results", "--store", path, "--sessions", "--format", "json").output)
    assert [(s["session"], s["results"], s["ok"], s["runs"]) for s in as_json] == [("aaaa1111", 2, 2, 2),
                                                                                  ("bbbb2222", 1, 0, 2)]
    # run time: the session's recorded run durations added up (4 s + 200 s; the failed run's 4 s)
    assert [s["run time"] for s in as_json] == ["3.4 min", "4 s"] and "run time" in lines[0]
    assert [s["run_s"] for s in as_json] == [204.0, 4.0]  # the same in seconds, for adding up elsewhere
    # a file run in parts, a session each: their run times added up under the table
    assert "run time in all: 3.5 min (2 sessions, 3 results)" in lines[3]
    single = _store(tmp_path / "one.db", [_record("c", session="cccc3333")],
                    sessions=[("cccc3333", "harness run quickstart")])
    assert "run time in all" not in _invoke("results", "--store", single, "--sessions", columns=200).output
    unknown = _invoke("results", "--store", path, "--session", "nope")
    assert unknown.exit_code == 2
    assert "no single session matches 'nope'" in unknown.output
    assert "aaaa1111" in unknown.output and "bbbb2222" in unknown.output
    one = _invoke("results", "--store", path, "--session", "bbbb", "--format", "json")
    assert [r["run_id"] for r in json.loads(one.output)] == ["bb"]


def _processes(backend, values, session="s1"):
    return [_record(f"{backend}{i}" + "x" * i, backend=backend, median=v, samples=[v * 0.99, v, v * 1.01])
            for i, v in enumerate(values)]


def test_compare_fits_columns_moves_shared_columns_and_wide_shows_every_warning(tmp_path):
    path = _store(tmp_path / "c.db", _processes("torch", [1.0, 1.01, 0.99, 1.0, 1.02])
                  + _processes("tensorflow", [2.0, 2.02, 1.98, 2.01, 2.0]))
    result = _invoke("compare", "--store", path, "--by", "backend", columns=100)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    table = lines[:next(i for i, line in enumerate(lines) if line.startswith("torch")) + 1]
    assert all(len(line) <= 100 for line in table), table
    assert lines[0].startswith("compared: backend; from session s1, 5 vs 5 processes; every row: workload=gemm")
    assert "size=1024" in result.output and "size=1024.0" not in result.output
    assert "processes=" not in result.output  # shared: said once, in the header line
    assert "\n[1] " in result.output and "CV 12.3% exceeds 5%" in result.output  # a footnote under the table
    wide = _invoke("compare", "--store", path, "--by", "backend", "--wide", columns=100)
    assert wide.exit_code == 0 and LONG_NOTE in wide.output
    assert "processes" in wide.output.splitlines()[1]  # a column again


def test_compare_says_n_a_where_a_ratio_has_no_interval(tmp_path):
    # one process against several: no bootstrap over processes, and no within-process one either
    path = _store(tmp_path / "n.db", _processes("torch", [1.0]) + _processes("tensorflow", [2.0, 2.02, 1.98]))
    result = _invoke("compare", "--store", path, "--by", "backend", columns=200)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("torch"))
    assert "2 [n/a]" in row


def test_a_footnote_mark_survives_its_cell_being_shortened_and_runs_read_as_ranges():
    rows = [{"value": "tensorflow", "verdict": "no difference found (busy machine)",
             "warnings": "a; b; c; d; e"}, {"value": "jax", "verdict": "faster", "warnings": "b"}]
    fitted = fit(rows, width=30, keep=("value", "verdict"), required=("value", "verdict"), shorten={"verdict": 16},
                 footnotes=("warnings",), marked="verdict")
    first = fitted.text.splitlines()[1]
    assert first.endswith("... [1-4]") and len(first) <= 30, fitted.text  # b is in every row: said once, unmarked
    assert fitted.shared == ["b"] and fitted.notes == ["a", "c", "d", "e"]
    assert fitted.footer().splitlines()[:2] == ["every row: b", "[1] a"]
