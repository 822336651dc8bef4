"""The results page (docs/results.md): generated from the stores its manifest lists, commentary kept."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from click.testing import CliRunner

from harness.cli import main
from harness.present.results_page import METRIC_UNITS, commentary_blocks
from harness.results.compare import METRICS

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"
#: The smallest committed store: TensorFlow's two strategies, 1 and 2 replicas.
SMALL = "h200-2026-12-01.db"


def _invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _entry() -> dict:
    manifest = yaml.safe_load((DATA / "manifest.yaml").read_text())
    return next(s for s in manifest["stores"] if s["file"] == SMALL)


def _manifest(tmp_path: Path, entry: dict | None = None, sections: list | None = None) -> Path:
    shutil.copy(DATA / SMALL, tmp_path / SMALL)
    sections = sections if sections is not None else [
        {"id": "scaling", "title": "Two GPUs", "stores": [SMALL], "by": ["replicas"]}]
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump({"title": "Results", "stores": [entry or _entry()], "sections": sections}))
    return path


def test_the_committed_page_is_what_its_command_makes_from_the_stores():
    result = CliRunner().invoke(main, ["results-page", "--check", "--manifest", str(DATA / "manifest.yaml"),
                                       "--output", str(ROOT / "docs" / "results.md")])
    assert result.exit_code == 0, result.output
    assert "benchmarks.md" in result.output  # its stores table too, in the methodology page
    methods = (ROOT / "docs" / "benchmarks.md").read_text()
    for entry in yaml.safe_load((DATA / "manifest.yaml").read_text())["stores"]:
        assert f"[{entry['file']}](data/{entry['file']})" in methods and entry["hardware"] in methods


def test_the_stores_table_block_of_another_page_is_filled_and_checked(tmp_path):
    manifest = _manifest(tmp_path)
    page, methods = tmp_path / "results.md", tmp_path / "benchmarks.md"
    methods.write_text("# How\n\n<!-- generated:stores -->\nstale rows\n<!-- /generated:stores -->\n\nmore\n")
    assert _invoke("results-page", "--manifest", str(manifest), "--output", str(page)).exit_code == 0
    text = methods.read_text()
    assert "stale rows" not in text and f"[{SMALL}]({SMALL})" in text and text.endswith("\nmore\n")
    methods.write_text(text.replace("2 x NVIDIA H200", "2 x NVIDIA H100"))
    assert _invoke("results-page", "--manifest", str(manifest), "--output", str(page), "--check").exit_code == 1


def test_the_page_opens_with_the_answer_then_the_cross_framework_table():
    text = (ROOT / "docs" / "results.md").read_text()
    assert "(no commentary yet)" not in commentary_blocks(text)["answer"]
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0].startswith("## ResNet-50 training, TensorFlow against torch, with verdicts")
    assert text.index("commentary:answer") < text.index(headings[0])
    first = text[text.index(headings[0]):text.index(headings[1])]
    assert "](data/h200-2026-12-03-frameworks-amp_bf16-compiled-eager.db)" in first  # each figure links its store
    assert "| 4 vs 4 |" in first and "one process a side" not in first  # the first table carries verdicts


def test_regenerating_keeps_the_commentary_and_restores_the_generated_figures(tmp_path):
    manifest = _manifest(tmp_path)
    page = tmp_path / "results.md"
    assert _invoke("results-page", "--manifest", str(manifest), "--output", str(page)).exit_code == 0
    made = page.read_text()
    assert "| 1 | 2 |" in made and "no verdict: one process a side" in made
    edited = made.replace("<!-- commentary:scaling -->\n(no commentary yet)",
                          "<!-- commentary:scaling -->\nXLA keeps the all-reduce outside.")
    edited = edited.replace("| 1 | 2 |", "| 1 | 3 |")  # a hand edit of a generated figure
    page.write_text(edited)
    assert _invoke("results-page", "--manifest", str(manifest), "--output", str(page), "--check").exit_code == 1
    assert _invoke("results-page", "--manifest", str(manifest), "--output", str(page)).exit_code == 0
    assert page.read_text() == made.replace("<!-- commentary:scaling -->\n(no commentary yet)",
                                            "<!-- commentary:scaling -->\nXLA keeps the all-reduce outside.")


def test_a_manifest_entry_that_disagrees_with_its_store_is_refused(tmp_path):
    entry = {**_entry(), "hardware": "8 x NVIDIA B200"}
    page = tmp_path / "results.md"
    result = CliRunner().invoke(main, ["results-page", "--manifest", str(_manifest(tmp_path, entry)),
                                       "--output", str(page)])
    assert result.exit_code == 2
    assert f"stores.{SMALL}.hardware" in result.output and "2 x NVIDIA H200" in result.output
    assert not page.exists()


def test_a_section_on_a_store_not_current_is_refused(tmp_path):
    entry = {**_entry(), "current": False}
    result = CliRunner().invoke(main, ["results-page", "--manifest", str(_manifest(tmp_path, entry)),
                                       "--output", str(tmp_path / "results.md")])
    assert result.exit_code == 2 and "sections.scaling.stores" in result.output


def test_a_values_section_lays_out_one_row_per_configuration(tmp_path):
    sections = [{"id": "strategies", "title": "Strategies", "stores": [SMALL], "kind": "values",
                 "rows": ["execution", "replicas"], "by": ["scenario"]}]
    page = tmp_path / "results.md"
    assert _invoke("results-page", "--manifest", str(_manifest(tmp_path, sections=sections)),
                   "--output", str(page)).exit_code == 0
    text = page.read_text()
    assert "| execution | replicas |" in text
    assert "| compiled | 2 | 9,904 | 6,949 | images/s |" in text


def test_a_values_section_can_lay_out_another_figure_of_the_records(tmp_path):
    # first steps instead of the headline: each record's own value, in seconds, not images/s
    sections = [{"id": "first", "title": "First steps", "stores": [SMALL], "kind": "values",
                 "rows": ["execution", "replicas"], "by": ["scenario"], "metric": "first_step_s"}]
    page = tmp_path / "results.md"
    assert _invoke("results-page", "--manifest", str(_manifest(tmp_path, sections=sections)),
                   "--output", str(page)).exit_code == 0
    text = page.read_text()
    assert "| compiled | 2 | 40.8 | 47.2 | s |" in text and "| graph | 1 | 13.8 | - | s |" in text
    assert "images/s" not in text and "9,904" not in text


def test_a_store_of_a_section_can_keep_part_of_its_records(tmp_path):
    # a store's own filter applies to that store alone: the same store twice gives graph from the one and
    # compiled on two GPUs from the other, and the single-GPU compiled run (6,690) from neither
    sections = [{"id": "strategies", "title": "Strategies", "kind": "values", "rows": ["execution", "replicas"],
                 "by": ["scenario"], "stores": [{"file": SMALL, "where": {"execution": "graph"}},
                                                {"file": SMALL, "where": {"execution": "compiled", "replicas": 2}}]}]
    page = tmp_path / "results.md"
    assert _invoke("results-page", "--manifest", str(_manifest(tmp_path, sections=sections)),
                   "--output", str(page)).exit_code == 0
    text = page.read_text()
    assert "| compiled | 2 | 9,904 | 6,949 | images/s |" in text and "| graph | 1 | 902.9 | - | images/s |" in text
    assert "6,690" not in text
    assert "only execution: graph)" in text and "only execution: compiled; replicas: 2)" in text  # the page says so


def test_a_store_filter_with_a_field_it_does_not_know_is_refused(tmp_path):
    sections = [{"id": "strategies", "title": "Strategies", "by": ["replicas"],
                 "stores": [{"file": SMALL, "when": {"execution": "graph"}}]}]
    page = tmp_path / "results.md"
    result = CliRunner().invoke(main, ["results-page", "--manifest", str(_manifest(tmp_path, sections=sections)),
                                       "--output", str(page)])
    assert result.exit_code == 2 and "sections.0.stores.0.when: Extra inputs" in result.output
    assert "Traceback" not in result.output
    assert not page.exists()


def test_every_figure_a_values_section_may_lay_out_has_its_unit():
    assert set(METRICS) - {"median"} == set(METRIC_UNITS)


def test_a_values_section_with_a_figure_records_do_not_have_is_refused(tmp_path):
    sections = [{"id": "first", "title": "First steps", "stores": [SMALL], "kind": "values",
                 "rows": ["execution"], "by": ["scenario"], "metric": "first_step"}]
    page = tmp_path / "results.md"
    result = CliRunner().invoke(main, ["results-page", "--manifest", str(_manifest(tmp_path, sections=sections)),
                                       "--output", str(page)])
    assert result.exit_code == 2 and "sections.first.metric" in result.output and "first_step_s" in result.output
    assert "Traceback" not in result.output and not page.exists()


def test_a_breakdown_section_puts_each_sides_classes_in_a_column(tmp_path):
    # the H200 breakdown store: a column per backend and execution, a row per class, the steps beneath
    store = "h200-2026-12-01-breakdown.db"
    manifest = yaml.safe_load((DATA / "manifest.yaml").read_text())
    entry = {**next(s for s in manifest["stores"] if s["file"] == store), "current": True}  # kept as evidence there
    shutil.copy(DATA / store, tmp_path / store)
    sections = [{"id": "where", "title": "Where", "stores": [store], "kind": "breakdown",
                 "where": {"scenario": "breakdown-resnet50", "backend": ["torch", "tensorflow[keras=keras3]"]},
                 "by": ["backend", "execution"]}]
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump({"title": "Results", "stores": [entry], "sections": sections}))
    page = tmp_path / "results.md"
    assert _invoke("results-page", "--manifest", str(path), "--output", str(page)).exit_code == 0
    lines = page.read_text().splitlines()
    header = next(line for line in lines if line.startswith("| ms per step |"))
    assert "torch / eager" in header and "tensorflow[keras=keras3] / graph" in header
    assert "jax" not in header and "tf_keras" not in header  # `where` keeps the others out
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith("| ")}
    assert set(rows) >= {"conv", "norm", "idle", "profiled step", "timed step", "profiled vs timed"}
    column = header.split("|").index(" torch / eager ")
    cells = {name: row.split("|")[column].strip() for name, row in rows.items()}
    parts = ["conv", "matmul", "norm", "elementwise", "reduce", "layout", "copy", "comm", "other", "idle"]
    # the classes plus idle make the profiled step; the timed step is the record's
    assert abs(sum(float(cells[p]) for p in parts) - float(cells["profiled step"])) < 0.05
    assert cells["timed step"] == "54.74" and cells["profiled vs timed"] == "+4.8%"


def test_a_breakdown_sections_baseline_comes_first(tmp_path):
    # the breakdown store measured over two days lists torch's records last; `baseline: torch` puts its columns first
    store = "h200-2026-12-02-breakdown.db"
    manifest = yaml.safe_load((DATA / "manifest.yaml").read_text())
    entry = next(s for s in manifest["stores"] if s["file"] == store)
    shutil.copy(DATA / store, tmp_path / store)
    headers = {}
    for baseline in (None, "torch"):
        section = {"id": "where", "title": "Where", "stores": [store], "kind": "breakdown",
                   "where": {"scenario": "breakdown-resnet50"}, "by": ["backend", "execution"]}
        if baseline:
            section["baseline"] = baseline
        path = tmp_path / "manifest.yaml"
        path.write_text(yaml.safe_dump({"title": "Results", "stores": [entry], "sections": [section]}))
        page = tmp_path / "results.md"
        assert _invoke("results-page", "--manifest", str(path), "--output", str(page)).exit_code == 0
        headers[baseline] = next(line for line in page.read_text().splitlines() if line.startswith("| ms per step |"))
    first = [cell.strip() for cell in headers["torch"].split("|")[2:5]]
    assert first == ["torch / eager", "torch / compiled", "torch / cuda_graph"]
    assert not headers[None].split("|")[2].strip().startswith("torch")
    assert sorted(headers[None].split("|")) == sorted(headers["torch"].split("|"))  # the same columns, reordered


def test_a_time_section_adds_up_what_each_part_took():
    from harness.present.results_page import time_rows
    from harness.results.manifest import PageSection
    from harness.results.record import Result

    def run(precision, key, status="ok", duration=10.0, first=4.0, blocks=(0.5, 0.5)):
        return Result(workload="resnet50_train", run_key=key, status=status, params={"precision": precision},
                      duration_s=duration, first_step_s=first if status == "ok" else None,
                      timing={"block_wall_s": list(blocks)} if status == "ok" else {})

    records = ([run("tf32", "a") for _ in range(4)] + [run("tf32", "b") for _ in range(6)]
               + [run("tf32", "c", status="unsupported", duration=0.5)]
               + [run("amp_bf16", "d", duration=50.0, first=20.0) for _ in range(4)])
    section = PageSection(id="time", title="Time", stores=[], by=[], kind="time", rows=["workload", "precision"])
    tf32, bf16, total = time_rows(section, records)
    assert tf32 == {"workload": "resnet50_train", "precision": "tf32", "runs": "11 (10 measured, 1 decided at once)",
                    "processes a configuration": "4-6", "first steps": "40 s (40%)", "timed blocks": "10.0 s",
                    "run time": "100 s"}
    assert bf16["processes a configuration"] == "4" and bf16["run time"] == "200 s (3.3 min)"
    assert total["workload"] == "all" and total["runs"] == "15 (14 measured, 1 decided at once)"
    assert total["first steps"] == "120 s (40%)" and total["run time"] == "300 s (5.0 min)"
    # one part alone: no row adding up
    assert len(time_rows(section, [r for r in records if r.params["precision"] == "tf32"])) == 1


def test_the_page_says_what_the_frameworks_file_took_from_its_stores():
    text = (ROOT / "docs" / "results.md").read_text()
    section = text[text.index("## What the frameworks file took"):]
    section = section[:section.index("<!-- commentary:")]
    assert "| run time |" in section and "| all |" in section
    # its rows are the parts of the file at its defaults, no more and no fewer, and they add up within the
    # 45 minutes a comparison with verdicts is meant to take
    from harness.scenario.bundled import resolve_scenario_path
    from harness.scenario.load import load_scenarios

    planned = {(s.workload, p) for s in load_scenarios(resolve_scenario_path("frameworks"), [])
               for p in (s.sweep.get("precision") or [s.params["precision"]])}
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| resnet50_train |")
            or line.startswith("| gemm |")]
    assert {(r[0].strip("| "), r[1]) for r in rows} == planned
    total = next(line for line in section.splitlines() if line.startswith("| all |"))
    assert float(total.rsplit("(", 1)[1].split(" min")[0]) <= 45
