"""`harness validate` counts what `harness run` plans: the same planning code, processes included."""

from __future__ import annotations

import re

import yaml
from click.testing import CliRunner

from harness.cli import main
from harness.session.app import prepare_session
from harness.session.count import count_plan
from harness.session.request import SessionRequest


def _invoke(*args):
    # wide enough for any path: these tests count; the lines' widths are test_validate_width's
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "1000"})


def _planned(output: str) -> int:
    return int(re.search(r"plan: (\d+) run\(s\)", output).group(1))


def test_validate_and_dry_run_count_the_same_runs_processes_included():
    for args in (["quickstart"], ["quickstart", "--set", "measure.processes=3"], ["gpu_comparison"]):
        validated = _invoke("validate", *args)
        assert validated.exit_code == 0, validated.output
        # a fixed count, or the least-most of processes: auto, whose least is what the plan holds at first
        runs = [int(n) for n in re.findall(r": ok: .* = (\d+)(?:-\d+)? run\(s\)", validated.output)]
        assert sum(runs) == _planned(_invoke("run", *args, "--dry-run").output), validated.output
    quick = _invoke("validate", "quickstart").output
    assert "2 configuration(s) x 4-10 process(es) = 8-20 run(s)" in quick
    fixed = _invoke("validate", "quickstart", "--set", "measure.processes=5").output
    assert "2 configuration(s) x 5 process(es) = 10 run(s)" in fixed


def test_a_multi_document_file_over_the_run_limit_is_refused_by_validate_as_by_run(tmp_path):
    doc = {"workload": "gemm", "params": {"size": 8}, "backends": ["torch"], "devices": ["cpu"],
           "measure": {"processes": 5}, "sweep": {"precision": ["fp32", "tf32"]}}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([{"name": "a", **doc}, {"name": "b", **doc}]))
    # each document plans 10 runs, the file 20: under a limit of 15 each document passes, the file does not
    validated = _invoke("validate", str(path), "--max-runs", "15")
    ran = _invoke("run", str(path), "--max-runs", "15", "--dry-run")
    assert ran.exit_code == 2 and validated.exit_code == 2, validated.output
    assert "20 runs" in validated.output
    whole = _invoke("validate", str(path), "--max-runs", "20")
    assert whole.exit_code == 0 and "2 scenarios, 20 run(s) in all" in whole.output


def test_an_adaptive_process_count_is_counted_as_its_least_and_most():
    plan = prepare_session(SessionRequest(scenario_file="quickstart")).plan
    count = count_plan(plan)  # processes: auto plans its least (4) and may grow to its most (10)
    assert (count.configurations, count.least, count.most) == (2, 8, 20)
    assert count.runs == "8-20" and count.processes == "4-10"
    fixed = prepare_session(SessionRequest(scenario_file="quickstart", overrides=("measure.processes=5",))).plan
    assert count_plan(fixed).runs == "10" and count_plan(fixed).processes == "5"
    narrow = [s.with_measure(min_processes=2, max_processes=8) for s in plan if s.replicate < 2]
    count = count_plan(narrow)
    assert (count.configurations, count.least, count.most) == (2, 4, 16)
    assert count.runs == "4-16" and count.processes == "2-8"
