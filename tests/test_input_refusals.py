"""Bad input refused: thousands of generated malformed scenario files and --set values, and the corpus of
tests/hostile/ (alias bombs, recursive aliases, booleans for numbers, tags, duplicate keys...); each
is a clear error (InputError -> exit 2, within 2 s for the corpus), none a traceback."""

import re
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.errors import InputError
from harness.scenario.load import load_scenario
from tests.conftest import RELIABILITY

GOOD = {
    "name": "fuzz", "workload": "gemm", "params": {"size": 64, "precision": "fp32"},
    "measure": {"warmup": 1, "steps": 2, "repeats": 3}, "backends": ["torch"], "devices": ["cpu"],
}
FIELDS = ["name", "workload", "params", "measure", "backends", "devices", "seed", "sweep", "options", "capacity",
          "params.size", "params.precision", "params.batch", "measure.steps", "measure.warmup", "measure.timeout_s",
          "sweep.size", "sweep.precision", "unknown", "params.unknown"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _check(path, overrides=None):
    """Load; return 'valid' or 'error'; anything but InputError fails the test."""
    try:
        load_scenario(path, overrides)
        return "valid"
    except InputError as exc:
        text = str(exc)
        assert text and "Traceback" not in text
        return "error"


def _set(data, dotted, value):
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    head, _, tail = dotted.partition(".")
    if tail:
        inner = out.get(head) if isinstance(out.get(head), dict) else {}
        out[head] = {**inner, tail: value}
    else:
        out[head] = value
    return out


@settings(max_examples=1200, **SETTINGS)
@given(mutations=st.lists(st.tuples(st.sampled_from(FIELDS), values), min_size=1, max_size=3))
def test_mutated_scenarios_are_valid_or_a_clear_error(tmp_path, mutations):
    data = dict(GOOD)
    for field, value in mutations:
        data = _set(data, field, value)
    path = tmp_path / "fuzz.yaml"
    try:
        text = yaml.safe_dump(data, sort_keys=False)
    except yaml.YAMLError:
        return
    path.write_text(text, encoding="utf-8")
    RELIABILITY[f"generated scenario files: {_check(str(path))}"] += 1


@settings(max_examples=1000, **SETTINGS)
@given(text=st.text(max_size=300))
def test_arbitrary_text_files_are_valid_or_a_clear_error(tmp_path, text):
    path = tmp_path / "raw.yaml"
    path.write_text(text, encoding="utf-8")
    RELIABILITY[f"generated raw texts: {_check(str(path))}"] += 1


@settings(max_examples=600, **SETTINGS)
@given(overrides=st.lists(st.one_of(st.text(max_size=30),
                                    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["size", "precision", "measure.steps", "seed", "batch", "x.y.z", "name"]), st.text(max_size=15))),
                          min_size=1, max_size=3))
def test_arbitrary_set_values_are_valid_or_a_clear_error(tmp_path, overrides):
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(GOOD), encoding="utf-8")
    RELIABILITY[f"generated --set values: {_check(str(path), overrides)}"] += 1


@settings(max_examples=150, **SETTINGS)
@given(mutations=st.lists(st.tuples(st.sampled_from(FIELDS), values), min_size=1, max_size=2),
       overrides=st.lists(st.text(max_size=20), max_size=2))
def test_the_cli_exits_2_without_a_traceback_on_bad_input(tmp_path, mutations, overrides):
    data = dict(GOOD)
    for field, value in mutations:
        data = _set(data, field, value)
    path = tmp_path / "cli.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    args = ["validate", str(path)]
    for o in overrides:
        args += ["--set", o]
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    if result.exit_code == 2:
        assert "error" in result.output.lower()
    RELIABILITY[f"CLI invocations exiting {result.exit_code}"] += 1


# --------------------------------------------------------------------------- the hostile corpus
CORPUS = sorted((Path(__file__).parent / "hostile").glob("*.yaml"))


@pytest.fixture(scope="module")
def cli():
    runner = CliRunner()
    runner.invoke(main, ["validate", str(Path(__file__).parent.parent / "scenarios" / "quickstart.yaml")])  # imports
    return runner


def test_the_hostile_corpus_has_at_least_60_files():
    assert len(CORPUS) >= 60


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_each_hostile_file_is_a_clear_error_within_2_seconds(cli, path):
    started = time.monotonic()
    result = cli.invoke(main, ["validate", str(path)])
    took = time.monotonic() - started
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.output.startswith("error: ") and str(path) in result.output  # names the file
    assert len(result.output.strip().splitlines()) == 1  # one clear line
    assert took < 2.0, f"{path.name} took {took:.2f} s"
    RELIABILITY["hostile corpus files: exit 2 within 2 s"] += 1


@pytest.mark.parametrize("name", ["alias_bomb_in_sweep", "alias_bomb_in_options", "alias_bomb_of_long_strings",
                                  "alias_recursive_map", "values_20000_in_sweep", "size_true", "documents_150"])
def test_run_refuses_the_worst_of_them_before_writing_anything(cli, tmp_path, name, monkeypatch):
    import harness.session.start as start

    planned = []
    monkeypatch.setattr(start, "build_plan", lambda *a, **k: planned.append(a) or [])
    db = tmp_path / "h.db"
    result = cli.invoke(main, ["run", str(Path(__file__).parent / "hostile" / f"{name}.yaml"), "--store", str(db)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert planned == []  # refused while reading the file, before any plan is built from it
    assert not db.exists()


def test_a_file_over_the_size_limit_is_refused_unread(cli, tmp_path):
    from harness.scenario.reading import MAX_FILE_BYTES

    big = tmp_path / "big.yaml"
    big.write_text("name: x\nworkload: gemm\n# " + "x" * MAX_FILE_BYTES + "\n", encoding="utf-8")
    started = time.monotonic()
    result = cli.invoke(main, ["validate", str(big)])
    assert result.exit_code == 2 and "too large" in result.output
    assert time.monotonic() - started < 1.0


def test_booleans_are_not_numbers_in_set_overrides_either(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(GOOD), encoding="utf-8")
    for override in ("size=true", "batch=false", "size=[64, true]"):
        result = CliRunner().invoke(main, ["validate", str(path), "--set", override])
        assert result.exit_code == 2 and "not a boolean" in result.output, (override, result.output)


# --------------------------------------------------------------------------- flags, output paths and what reports carry
def _one_line_refusal(result, *words):
    """Exit 2, one `error:` line saying each of words, no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    assert result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1, result.output
    for word in words:
        assert word in result.output, result.output
    RELIABILITY["flags and paths refused: exit 2, one line"] += 1


@pytest.mark.parametrize("override, said", [
    ('name="line1\\nerror: injected line"', "'\\n'"), ('name="a\\rb"', "'\\r'"), ('name="a\\0b"', "'\\x00'"),
    ('name="   "', "only spaces"),
])
def test_a_name_with_control_characters_is_refused_through_set_too(tmp_path, override, said):
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(GOOD), encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", str(path), "--set", override])
    _one_line_refusal(result, "name", said)


def test_an_empty_store_path_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(GOOD), encoding="utf-8")
    for args in (["run", str(path), "--store", ""], ["results", "--store", " "], ["report", "--store", ""]):
        _one_line_refusal(CliRunner().invoke(main, args), "--store", "empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.yaml"]  # no harness.db written in its stead


@pytest.mark.parametrize("override, said", [
    ('name="\\u200b\\u200b"', "'\\u200b'"), ('name="a\\u2028b"', "'\\u2028'"), ('name="a\\u2029b"', "'\\u2029'"),
    ('name="gemm\\u200f"', "'\\u200f'"), ('name="\\ufeffgemm"', "'\\ufeff'"),
    ("params.size=0100", "'0100' is a YAML 1.1 number (64)"), ("params.size=1:04", "'1:04' is a YAML 1.1 number (64)"),
])
def test_invisible_name_characters_and_yaml_1_1_numbers_are_refused_through_set(tmp_path, override, said):
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(GOOD), encoding="utf-8")
    _one_line_refusal(CliRunner().invoke(main, ["validate", str(path), "--set", override]), said)


def test_an_empty_report_folder_or_session_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    from harness.results.store import open_store

    monkeypatch.chdir(tmp_path)
    with open_store(tmp_path / "s.db") as store:
        store.begin_session("s1", [], scenario_path=None, command="c")
    before = sorted(p.name for p in tmp_path.iterdir())
    _one_line_refusal(CliRunner().invoke(main, ["report", "--store", "s.db", "-o", ""]), "--output", "empty path")
    for args in (["results", "--session", ""], ["report", "--session", " "], ["compare", "--by", "backend",
                                                                             "--session", ""]):
        _one_line_refusal(CliRunner().invoke(main, [*args, "--store", "s.db"]), "--session", "empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no report written into the working folder


def test_csv_exports_give_formula_text_a_leading_quote_and_keep_numbers_numbers(tmp_path):
    import csv
    import io

    from harness.results.record import Result
    from harness.results.store import open_store

    names = ["=HYPERLINK(\"http://example.invalid\",\"x\")", "=cmd|' /C calc'!A0", "+1", "-2", "@SUM(A1)", "plain"]
    with open_store(tmp_path / "s.db") as store:
        store.begin_session("s1", [], scenario_path=None, command="c")
        for i, name in enumerate(names):
            store.add(Result(run_id=f"r{i}", session_id="s1", run_key=f"k{i}", scenario=name, workload="gemm",
                             backend="torch", device="cpu", status="ok", metric="tflops", median=-1.5 - i,
                             samples=[1.0], started_at=f"2026-12-01T00:00:0{i}"))
    result = CliRunner().invoke(main, ["results", "--store", str(tmp_path / "s.db"), "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert [r["scenario"] for r in rows] == ["'" + n for n in names[:-1]] + ["plain"]
    assert [float(r["median"]) for r in rows] == [-1.5 - i for i in range(len(names))]  # numbers, no quote
    sessions = CliRunner().invoke(main, ["results", "--store", str(tmp_path / "s.db"), "--sessions", "--format", "csv"])
    assert sessions.exit_code == 0 and "=" not in sessions.output.replace("'=", ""), sessions.output
    compared = CliRunner().invoke(main, ["compare", "--store", str(tmp_path / "s.db"), "--by", "scenario",
                                         "--format", "csv"])
    assert compared.exit_code in (0, 1) and not any(line.startswith(("=", "+", "@")) or ",=" in line
                                                    for line in compared.output.splitlines()), compared.output


@pytest.mark.parametrize("output, said", [("nodir/x.csv", "does not exist"), ("adir", "is a folder"), ("", "empty")])
def test_results_output_that_cannot_be_a_file_is_refused(tmp_path, output, said):
    db = tmp_path / "s.db"
    from harness.results.store import open_store

    open_store(db).close()
    (tmp_path / "adir").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for fmt in ("csv", "json", "table"):
        result = CliRunner().invoke(main, ["results", "--store", str(db), "--format", fmt, "-o",
                                           str(tmp_path / output) if output else ""])
        _one_line_refusal(result, "--output", said)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("flag, value", [("--fail-if-slower", "nan"), ("--fail-if-slower", "1e309"),
                                         ("--fail-if-slower", "inf"), ("--fail-if-slower", "-5"),
                                         ("--min-effect", "inf"), ("--min-effect", "nan"), ("--min-effect", "-1")])
def test_a_regression_gate_that_could_never_fail_is_refused(tmp_path, flag, value):
    # `nan` compares false with everything: "no row slower by more than nan%" would pass every time
    result = CliRunner().invoke(main, ["compare", "--store", str(tmp_path / "none.db"), "--by", "backend", flag, value])
    _one_line_refusal(result, flag, "finite percentage")


HOSTILE_NAME = "<img src=x onerror=alert(1)> ![p](http://example.invalid/t.png)"


def _shown_as_text(text):
    # no tag, no image or link to fetch: each markup character backslash-escaped
    assert not re.search(r"(?<!\\)<img", text) and not re.search(r"(?<!\\)\[p", text), text
    assert "\\<img src=x onerror=alert(1)\\>" in text and "!\\[p\\](http://example.invalid/t.png)" in text


def test_compare_markdown_shows_a_hostile_name_as_text(tmp_path, fake_backend, write_scenario):
    db = str(tmp_path / "m.db")
    for name in (HOSTILE_NAME, "plain"):
        path = write_scenario({"name": name, "workload": "gemm", "params": {"size": 16},
                               "measure": {"warmup": 0, "steps": 1, "repeats": 2, "processes": 1},
                               "backends": ["fake"], "devices": ["cpu"]})
        ran = CliRunner().invoke(main, ["run", path, "--store", db, "-q"])
        assert ran.exit_code == 0, ran.output
    compared = CliRunner().invoke(main, ["compare", "--store", db, "--by", "scenario", "--format", "markdown"])
    assert compared.exit_code == 0, compared.output
    _shown_as_text(compared.output)
    RELIABILITY["hostile names shown as text in Markdown"] += 1


def test_the_markdown_report_shows_what_it_carries_as_text():
    from harness.present.report.page import Section, render_markdown

    section = Section(HOSTILE_NAME, [("table", [{"scenario": HOSTILE_NAME}]), ("list", [HOSTILE_NAME]),
                                     ("text", HOSTILE_NAME), HOSTILE_NAME])
    text = render_markdown([section], [f"Scenario: {HOSTILE_NAME}"])
    assert text.count("\\<img src=x onerror=alert(1)\\>") == 6  # overview, title, cell, list item, text, note
    _shown_as_text(text)
    RELIABILITY["hostile names shown as text in Markdown"] += 1
