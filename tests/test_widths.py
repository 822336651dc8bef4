"""Every table harness prints fits the terminal: run (its lines, its dry run, its summary), results and
compare, at 80 and 120 columns, on a store with two workloads; --wide keeps everything."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from harness.cli import main
from tests.test_compare import processes, store_records

WIDTHS = (80, 100, 120)
#: A long warning: the fitted table shortens or leaves it out, --wide prints it whole.
LONG = "SM clock fell to 1545 MHz during the timed region (max 1980 MHz): throttling, or other load on the machine"


def _invoke(width, *args):
    result = CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": str(width)})
    assert "Traceback" not in result.output, result.output
    return result


def _too_wide(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.fixture
def two_workloads(tmp_path):
    records = []
    for backend, scale in (("torch", 1.0), ("tensorflow", 0.9)):
        for precision in ("tf32", "amp_bf16"):
            records += processes(1000.0 * scale, backend=backend, precision=precision, seed=len(records))
            records += processes(400.0 * scale, backend=backend, workload="gemm", precision=precision,
                                 seed=len(records) + 50)
    for record in records:
        if record["backend"] == "tensorflow":
            record["options"] = {"keras": "tf_keras"}
            record["warnings"] = [LONG]
    return store_records(tmp_path / "two.db", records)


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_on_two_workloads_fits_and_says_what_it_left_out(two_workloads, width):
    result = _invoke(width, "compare", "--store", two_workloads, "--by", "backend")
    assert result.exit_code == 0, result.output
    assert _too_wide(result.output, width) == []
    assert "resnet50_train: compared: backend" in result.output and "gemm: compared: backend" in result.output
    assert "every row:" in result.output  # the constant columns, said once
    assert "batch_size" not in result.output.split("gemm: compared")[1].split("fastest")[0]  # no other workload's dashes
    assert LONG in " ".join(result.output.split())  # under the table, whole
    wide = _invoke(width, "compare", "--store", two_workloads, "--by", "backend", "--wide")
    assert LONG in wide.output and _too_wide(wide.output, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_results_on_two_workloads_fits(two_workloads, width):
    result = _invoke(width, "results", "--store", two_workloads)
    assert result.exit_code == 0, result.output
    assert _too_wide(result.output, width) == []
    assert "resnet50_train: every row:" in result.output and "gemm: every row:" in result.output


@pytest.mark.parametrize("width", WIDTHS)
def test_a_memory_metric_reads_in_gib_or_mib(two_workloads, width):
    result = _invoke(width, "compare", "--store", two_workloads, "--by", "backend", "--metric",
                     "peak_allocated_bytes")
    assert result.exit_code == 0, result.output
    assert _too_wide(result.output, width) == []
    shown = result.output if width >= 120 else _invoke(width, "compare", "--store", two_workloads, "--by", "backend",
                                                       "--metric", "peak_allocated_bytes", "--wide").output
    assert " GiB" in shown and "20480000000" not in shown  # 256 x 80e6 bytes, as people read it


def _two_workload_file(write_scenario):
    common = ("measure: {warmup: 0, steps: 1, repeats: 2, timeout_s: 60, processes: 2}\n"
              "backends: [fake]\ndevices: [cpu]\n")
    return write_scenario(
        "name: widths-gemm\nworkload: gemm\nparams: {size: 32}\nsweep: {precision: [fp32, tf32]}\n" + common
        + "---\nname: widths-resnet\nworkload: resnet50_train\nparams: {batch_size: 2, image_size: 32}\n" + common)


@pytest.mark.parametrize("width", WIDTHS)
def test_run_lines_dry_run_and_summary_fit(tmp_path, fake_backend, write_scenario, harness_cli, width):
    path = _two_workload_file(write_scenario)
    code, out, err = harness_cli("run", path, "--dry-run", env={"COLUMNS": str(width)})
    assert code == 0, err
    assert _too_wide(out + err, width) == [] and "plan: 6 run(s)" in out
    assert "every gemm run:" in out and "every resnet50_train run:" in out
    code, out, err = harness_cli("run", path, "--store", "w.db", env={"COLUMNS": str(width)})
    assert code == 0, err
    assert _too_wide(out + err, width) == []
    summary = [line for line in out.splitlines() if line.startswith("fake")]
    assert len(summary) == 3  # one row per configuration, not per process
    assert all(" 2 " in line for line in summary)  # each with its process count
    code, wide, _ = harness_cli("run", path, "--store", "w2.db", "--wide", env={"COLUMNS": str(width)})
    assert code == 0 and len([line for line in wide.splitlines() if " fake " in line]) == 6  # a row a process


def test_memory_on_the_cpu_names_the_metric_both_sides_record(tmp_path):
    records = (processes(1000.0, backend="torch", device="cpu", device_name="AMD EPYC", seed=1)
               + processes(900.0, backend="tensorflow", device="cpu", device_name="AMD EPYC", seed=2))
    for record in records:
        record["host_peak_rss_bytes"] = 700 * 1024**2 if record["backend"] == "torch" else 820 * 1024**2
        if record["backend"] == "torch":
            record["peak_allocated_bytes"] = None  # torch's allocator peak is a GPU figure
    path = store_records(tmp_path / "cpu.db", records)
    refused = _invoke(120, "compare", "--store", path, "--by", "backend", "--metric", "peak_allocated_bytes")
    assert refused.exit_code == 2
    assert "no value recorded for torch on cpu" in refused.output and "--metric host_peak_rss_bytes" in refused.output
    rss = _invoke(120, "compare", "--store", path, "--by", "backend", "--metric", "host_peak_rss_bytes")
    assert rss.exit_code == 0 and "700.0 MiB" in rss.output and "820.0 MiB" in rss.output


@pytest.mark.parametrize("width", WIDTHS)
def test_list_and_env_fit(width):
    for command in ("list", "env"):
        result = _invoke(width, command)
        assert result.exit_code == 0, result.output
        assert _too_wide(result.output, width) == [], command


#: The columns that answer the question: they stay at every width the tests try.
ANSWER = ("value", "ratio [95% CI]", "change", "p", "verdict")


def _table_header(text: str) -> str:
    """The table's header (its two lines joined, where a header folds), the line above its first row."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("value") or line.lstrip().startswith("baseline"))
    return " ".join(lines[at:at + 2])


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_keeps_the_answering_figures_and_footnotes_the_warnings(tmp_path, width):
    records = processes(1000.0, backend="torch", seed=1) + processes(900.0, backend="tensorflow", seed=2)
    for record in records:
        if record["backend"] == "tensorflow":
            record["warnings"] = [LONG]
    path = store_records(tmp_path / "w.db", records)
    result = _invoke(width, "compare", "--store", path, "--by", "backend")
    assert result.exit_code == 0, result.output
    assert _too_wide(result.output, width) == []
    header = _table_header(result.output)
    for column in ANSWER:  # every answering figure, at 80 columns too (one space between columns there)
        assert column in header, (column, result.output)
    assert "baseline" in header and "median" in header and " p " in header + " "
    assert width > 80 or "columns left out: baseline to fit 80" in result.output  # only what is compared against
    row = next(line for line in result.output.splitlines() if "tensorflow " in line and "slower" in line)
    assert row.rstrip().endswith("[1]")  # the warning is a mark on the verdict ...
    notes = result.output.split("\n[1] ", 1)[1]
    assert " ".join(notes.split()).startswith("tensorflow: SM clock fell to 1545 MHz")  # ... its text below, whole
    assert width == 80 or "columns left out" not in result.output


@pytest.mark.parametrize("width", WIDTHS)
def test_results_footnotes_notes_and_keeps_the_figure(tmp_path, width):
    records = processes(1000.0, backend="torch", seed=1) + processes(900.0, backend="tensorflow", seed=2)
    records[0]["warnings"] = [LONG]
    path = store_records(tmp_path / "r.db", records)
    result = _invoke(width, "results", "--store", path)
    assert result.exit_code == 0 and _too_wide(result.output, width) == []
    marked = [line for line in result.output.splitlines() if line.startswith("torch [1]")]
    assert len(marked) == 1 and "median [95% CI]" in result.output and "\n[1] SM clock fell" in result.output


def _two_sessions(tmp_path):
    records = []
    for session, seed in (("s-old", 0), ("s-new", 10)):
        for backend, mean in (("torch", 1000.0), ("tensorflow", 900.0)):
            part = processes(mean, n=4, backend=backend, seed=seed + len(records))
            for record in part:
                record["session_id"] = session
                record["started_at"] = "2026-12-01T10:00:00" if session == "s-old" else "2026-12-02T10:00:00"
            records += part
    return store_records(tmp_path / "two-sessions.db", records)


def test_compare_says_what_it_pools_and_latest_takes_the_newest_session(tmp_path):
    path = _two_sessions(tmp_path)
    pooled = _invoke(100, "compare", "--store", path, "--by", "backend")
    assert pooled.exit_code == 0, pooled.output
    assert pooled.output.startswith("compared: backend; pooled: 2 sessions (s-old, s-new), 8 vs 8 processes;")
    latest = _invoke(100, "compare", "--store", path, "--by", "backend", "--session", "latest")
    assert latest.exit_code == 0, latest.output
    assert latest.output.startswith("compared: backend; from session s-new, 4 vs 4 processes;")
    rows = _invoke(100, "results", "--store", path, "--session", "latest").output
    assert "session=s-new" in rows and "s-old" not in rows


def test_results_keeps_the_session_column_at_120(tmp_path):
    result = _invoke(120, "results", "--store", _two_sessions(tmp_path))
    assert result.exit_code == 0 and _too_wide(result.output, 120) == []
    header = next(line for line in result.output.splitlines() if "median [95% CI]" in line)
    assert header.startswith("session")
    assert sum(line.startswith("s-old") for line in result.output.splitlines()) == 8


def test_the_quickstart_compares_the_session_it_ran():
    from pathlib import Path

    makefile = (Path(__file__).parent.parent / "Makefile").read_text()
    assert "harness compare --by backend --session latest" in makefile
