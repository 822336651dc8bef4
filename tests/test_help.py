"""Help that is true and whole: the defaults it states are the defaults, `harness --help` shows each command's
line whole at any width, and a mistyped command or choice is answered with the closest one."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from harness.cli import COMMANDS, main
from harness.errors import InputError
from harness.results.compare import MIN_EFFECT_PCT, compare
from harness.scenario.load import DEFAULT_MAX_RUNS
from harness.scenario.schema import Capacity
from harness.seam.backend import resolve_backend_name
from harness.timing import stats
from harness.timing.settings import Measure
from tests.test_compare import make_record


def _invoke(*args: str, columns: int = 80):
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": str(columns)})
    assert "Traceback" not in result.output
    return result


def _flat(text: str) -> str:
    # help is wrapped at spaces and hyphens: compare texts without any whitespace
    return re.sub(r"\s+", "", text)


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_the_command_list_shows_every_command_s_line_whole(columns):
    shown = _invoke("--help", columns=columns)
    assert shown.exit_code == 0
    listing = shown.output.split("Commands:", 1)[1]
    for name, line in COMMANDS.items():
        assert _flat(line) in _flat(listing), name
    assert "..." not in listing


def test_compare_help_states_the_processes_and_effect_it_uses():
    text = " ".join(_invoke("compare", "--help", columns=200).output.split())
    least, most = Measure().process_bounds()
    assert f"at least {stats.processes_needed(stats.VERDICT_ALPHA)} processes a side" in text
    assert f"`measure.processes`: {Measure().processes} by default, {least} to {most} processes" in text
    assert f"p < {stats.VERDICT_ALPHA:g}" in text
    assert f"(default {MIN_EFFECT_PCT:g})" in text


def test_run_and_validate_help_state_the_schema_s_defaults():
    for command in ("run", "validate"):
        assert f"Largest plan accepted (default {DEFAULT_MAX_RUNS})." in _invoke(command, "--help", columns=200).output
    text = " ".join(_invoke("run", "--help", columns=200).output.split())
    capacity = Capacity()
    assert f"capacity.start; default {capacity.start}," in text
    assert f"capacity.limit; default {capacity.limit})" in text
    assert f"capacity.resolution; default {capacity.resolution})" in text


def test_a_mistyped_command_is_answered_with_the_closest():
    typo = _invoke("rn")
    assert typo.exit_code == 2 and "No such command 'rn'. Did you mean run?" in typo.output
    assert "Did you mean results-page?" in _invoke("results-pag").output
    far = _invoke("xyzzy")
    assert far.exit_code == 2 and "Did you mean" not in far.output and "No such command 'xyzzy'" in far.output


@pytest.mark.parametrize("args, answer", [
    (("compare", "--by", "backend", "--format", "jsn"), "did you mean `json`?"),
    (("results", "--format", "parqet"), "did you mean `parquet`?"),
    (("run", "quickstart", "--dry-run", "--executor", "slrum"), "did you mean `slurm`?"),
])
def test_a_mistyped_choice_is_answered_with_the_closest(args, answer):
    result = _invoke(*args)
    assert result.exit_code == 2 and answer in result.output and "is not one of" in result.output


def test_a_mistyped_backend_is_answered_with_the_closest():
    with pytest.raises(InputError, match="expected one of .*; did you mean `tensorflow`\\?"):
        resolve_backend_name("tensorflw")
    result = _invoke("run", "quickstart", "--dry-run", "--backend", "pytroch")
    assert result.exit_code == 2 and "did you mean `pytorch`?" in result.output
    with pytest.raises(InputError) as far:
        resolve_backend_name("caffe")
    assert "did you mean" not in str(far.value)


def test_mistyped_by_metric_and_baseline_values_are_answered_with_the_closest():
    records = [make_record(1000.0, seed=1), make_record(1100.0, backend="tensorflow", seed=2)]
    for kwargs, answer in (({"by": ["backnd"]}, "did you mean `backend`?"),
                           ({"by": ["backend"], "metric": "step_time"}, "did you mean `step_time_s`?"),
                           ({"by": ["backend"], "baseline": "tensorflo"}, "did you mean `tensorflow`?")):
        with pytest.raises(InputError, match=re.escape(answer)):
            compare(records, **kwargs)
