"""`validate` and `run --dry-run` fit the terminal, and warn (exit 0) where a configuration's processes are too few
for compare to give a verdict: the rule compare applies, so the two cannot drift apart."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.results.compare.verdicts import INCONCLUSIVE, inconclusive_reason
from harness.timing import stats


def _invoke(*args: str, columns: int):
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def _widest(output: str) -> int:
    return max(len(line) for line in output.splitlines())


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("args", [("quickstart",), ("quickstart", "--set", "measure.processes=2"),
                                  ("gpu_comparison",)])
def test_validate_fits_the_terminal(args, columns):
    out = _invoke("validate", *args, columns=columns)
    assert ": ok: " in out and _widest(out) <= columns, out


@pytest.mark.parametrize("columns", [80, 120])
def test_a_dry_run_fits_the_terminal(tmp_path, columns):
    out = _invoke("run", "quickstart", "--dry-run", "--store", str(tmp_path / "s.db"), "--set", "measure.processes=2",
                  "--time-limit", "10m", columns=columns)
    assert "plan: 4 run(s)" in out and "measure: " in out and "time limit: 10 min" in out
    assert _widest(out) <= columns, out


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("command", ["validate", "run"])
def test_too_few_processes_for_a_verdict_are_warned_of_by_compare_s_rule(tmp_path, command):
    extra = ["--dry-run", "--store", str(tmp_path / "s.db")] if command == "run" else []
    need = stats.processes_needed(stats.VERDICT_ALPHA)
    few = _flat(_invoke(command, "quickstart", *extra, "--set", f"measure.processes={need - 1}", columns=80))
    reason = inconclusive_reason(need - 1, need - 1)
    assert reason.startswith(INCONCLUSIVE)  # compare's own verdict for these counts
    assert f"warning: measure.processes: {reason.split(': ', 1)[1]}" in few
    for enough in ([f"measure.processes={need}"], []):  # a fixed count, and auto (from the fewest a verdict needs)
        sets = [a for s in enough for a in ("--set", s)]
        assert "warning: measure.processes" not in _invoke(command, "quickstart", *extra, *sets, columns=80)
    auto_low = _flat(_invoke(command, "quickstart", *extra, "--set", "measure.min_processes=2", columns=80))
    assert "warning: measure.processes: 2 processes per side cannot reach" in auto_low


def test_resuming_a_finished_session_says_there_is_nothing_to_run(tmp_path, fake_backend, write_scenario):
    db = str(tmp_path / "r.db")
    for measure, planned in (({"processes": 1}, 2), ({"processes": "auto", "min_processes": 2, "max_processes": 2}, 4)):
        path = write_scenario({"name": "r", "workload": "gemm", "params": {"size": 32}, "backends": ["fake"],
                               "devices": ["cpu"], "sweep": {"batch": [1, 2]},
                               "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, **measure}})
        first = CliRunner().invoke(main, ["run", path, "--store", db, "-q"], env={"COLUMNS": "120"})
        assert first.exit_code == 0, first.output
        session = re.search(r"session (\w+): ", first.output).group(1)
        again = CliRunner().invoke(main, ["run", "--resume", session, "--store", db], env={"COLUMNS": "120"})
        assert again.exit_code == 0, again.output
        assert f"nothing to run: session {session} has every result ({planned} run(s))" in again.output
        assert "(no results)" not in again.output
        if measure["processes"] == 1:  # nothing is started: no word of the machine's load either
            assert "warning" not in again.output and "resuming" not in again.output
