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
    page = (ROOT / "docs" / "results.md").read_text()
    for entry in yaml.safe_load((DATA / "manifest.yaml").read_text())["stores"]:
        assert f"[{entry['file']}](data/{entry['file']})" in page and entry["hardware"] in page


def test_the_stores_table_is_kept_once_and_the_methodology_page_links_to_it():
    methods = (ROOT / "docs" / "benchmarks.md").read_text()
    assert "generated:stores" not in methods and "| store | measured |" not in methods
    assert "(results.md#the-stores)" in methods and "## The stores" in (ROOT / "docs" / "results.md").read_text()


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
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0].startswith("## ResNet-50 training, TensorFlow against torch, with verdicts")
    first_screen = text[:text.index(headings[0])]
    assert "**Each framework's fastest path" in first_screen and "**The answer, as the stores below hold it.**" \
        in first_screen
    assert "answer" not in commentary_blocks(text)  # generated from its template, not kept as commentary
    first = text[text.index(headings[0]):text.index(headings[1])]
    assert "](data/h200-2026-12-03-frameworks-amp_bf16-compiled-eager.db)" in first  # each figure links its store
    assert "| 4 vs 4 |" in first and "one process a side" not in first  # the first table carries verdicts
    # every verdict keeps its reason, beside its p
    assert "| 0.0286 | no difference found: -1.6% is under the 2% minimum effect |" in first


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
    assert tf32 == {"workload": "resnet50_train", "precision": "tf32", "session": "-", "date": "-", "GPU": "-",
                    "runs": "11 (10 measured, 1 decided at once)", "processes a configuration": "4-6",
                    "first steps": "40 s (40%)", "timed blocks": "10.0 s", "run time": "100 s"}
    assert bf16["processes a configuration"] == "4" and bf16["run time"] == "200 s (3.3 min)"
    assert total["workload"] == "sum of the 2 parts above" and total["runs"] == "15 (14 measured, 1 decided at once)"
    assert total["first steps"] == "120 s (40%)" and total["run time"] == "300 s (5.0 min)"
    # one part alone: no row adding up
    assert len(time_rows(section, [r for r in records if r.params["precision"] == "tf32"])) == 1


def test_the_page_says_what_the_frameworks_file_took_from_its_stores():
    text = (ROOT / "docs" / "results.md").read_text()
    section = text[text.index("## What the frameworks file took"):]
    section = section[:section.index("<!-- commentary:")]
    assert "| run time |" in section and "| sum of the " in section
    # its rows are the parts of the file at its defaults, no more and no fewer, and they add up within the
    # 45 minutes a comparison with verdicts is meant to take
    from harness.scenario.bundled import resolve_scenario_path
    from harness.scenario.load import load_scenarios

    planned = {(s.workload, p) for s in load_scenarios(resolve_scenario_path("frameworks"), [])
               for p in (s.sweep.get("precision") or [s.params["precision"]])}
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| resnet50_train |")
            or line.startswith("| gemm |")]
    assert {(r[0].strip("| "), r[1]) for r in rows} == planned
    total = next(line for line in section.splitlines() if line.startswith("| sum of the "))
    assert float(total.rsplit("(", 1)[1].split(" min")[0]) <= 45
    # each part is one session on one GPU; the sum names every date and GPU of its parts
    header = next(line for line in section.splitlines() if line.startswith("| workload |")).strip("| ").split(" | ")
    parts = [dict(zip(header, line.strip("| ").split(" | "))) for line in section.splitlines()
             if line.startswith(("| resnet50_train |", "| gemm |"))]
    assert all(len(p["session"]) == 16 and p["GPU"].count("GPU-") == 1 for p in parts)
    summed = dict(zip(header, total.strip("| ").split(" | ")))
    assert set(summed["date"].split(", ")) == {p["date"] for p in parts}
    assert set(summed["GPU"].split(", ")) == {p["GPU"] for p in parts}


def _committed():
    from harness.results.manifest import load_manifest, load_stores

    manifest = load_manifest(DATA / "manifest.yaml")
    return manifest, load_stores(manifest, DATA, DATA / "manifest.yaml")


def test_every_compared_row_is_traced_to_exactly_the_records_of_its_processes():
    from harness.present.page_answer import row_records
    from harness.present.results_page import _selected, section_table
    from harness.results.compare import field_value

    manifest, stores = _committed()
    for section in (s for s in manifest.sections if s.kind == "compare"):
        records = _selected(section, stores)
        for row in section_table(section, [r for _, r in records]):
            sides = [" / ".join(str(field_value(r, f)) for f in section.by)
                     for _, r in row_records(row, section.by, records)]
            assert (sides.count(str(row.baseline)), sides.count(str(row.value))) == (row.baseline_runs,
                                                                                   row.value_runs), section.id


def test_a_row_measured_apart_from_most_of_its_table_is_marked_and_says_where():
    from harness.present.page_answer import Origin, marked

    usual, other = Origin(("2026-12-03",), ("5009863",), ("GPU-3befa103",)), Origin(("2026-12-02",), ("c6b327b",),
                                                                                    ("GPU-2ac7255b",))
    marks, notes = marked([usual, other, usual, other, usual])
    assert marks == ["", "a", "", "a", ""]
    assert notes == ["a: measured 2026-12-02, commit c6b327b, on GPU-2ac7255b; the unmarked rows 2026-12-03, "
                     "commit 5009863, on GPU-3befa103."]
    assert marked([usual, usual]) == (["", ""], [])
    # on the page: the ResNet-50 verdict table mixes three sessions; its amp_fp16 rows are marked as such
    text = (ROOT / "docs" / "results.md").read_text()
    table = text[text.index("## ResNet-50 training, TensorFlow against torch"):text.index("<!-- commentary:")]
    fp16 = [line for line in table.splitlines() if line.startswith("| compiled | amp_fp16 |")]
    mark = fp16[0].rstrip(" |").rsplit("| ", 1)[1]
    assert mark in "abc" and all(line.rstrip(" |").endswith(f"| {mark}") for line in fp16)
    assert f"\n{mark}: measured 2026-12-02, commit c6b327b, on GPU-2ac7255b;" in table


def test_the_answer_states_figures_only_through_placeholders_the_generator_fills():
    from harness.present.page_answer import NAMES_WITH_DIGITS, prose_digits

    template = (DATA / "answer.md").read_text()
    assert prose_digits(template) == []
    assert template.count("{{") >= 20  # its figures are there, each from its table
    # what the scan lets through is names, not figures
    assert all(any(c.isalpha() for c in name) for name in NAMES_WITH_DIGITS if name != "2**31")
    assert prose_digits("Keras 3 is 5% behind in amp_bf16 {{t | a=1 | b}}") == ["5%"]


def test_a_template_with_a_figure_of_its_own_or_a_placeholder_that_matches_no_row_is_refused(tmp_path):
    manifest = _manifest(tmp_path)
    raw = yaml.safe_load(manifest.read_text())
    raw["answer"] = {"template": "answer.md", "parts": [{"label": "ResNet-50", "sections": ["scaling"]}]}
    manifest.write_text(yaml.safe_dump(raw))
    page = tmp_path / "results.md"
    (tmp_path / "answer.md").write_text("Two GPUs give {{scaling | execution=graph | scaling efficiency}} of "
                                        "linear; {{first-screen | framework=2 | fastest path}}.\n")
    assert _invoke("results-page", "--manifest", str(manifest), "--output", str(page)).exit_code == 0
    made = page.read_text()
    assert "Two GPUs give 95.8% of linear; compiled, amp_bf16." in made  # each figure from its table
    assert "| ResNet-50 | 2 | compiled, amp_bf16 | 9,904 images/s |" in made and "{{" not in made
    (tmp_path / "answer.md").write_text("Two GPUs give 96% of linear.\n")
    result = CliRunner().invoke(main, ["results-page", "--manifest", str(manifest), "--output", str(page)])
    assert result.exit_code == 2 and "a figure in the answer's own words (96%)" in result.output
    (tmp_path / "answer.md").write_text("{{scaling | execution=eager | verdict}}\n")
    result = CliRunner().invoke(main, ["results-page", "--manifest", str(manifest), "--output", str(page)])
    assert result.exit_code == 2 and "0 rows match" in result.output
    raw["answer"]["parts"][0]["sections"] = ["nothing"]
    manifest.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(main, ["results-page", "--manifest", str(manifest), "--output", str(page)])
    assert result.exit_code == 2 and "answer.parts.0.sections" in result.output


def test_the_first_screen_gives_each_framework_s_fastest_path_from_the_stores():
    from harness.present.results_page import _selected, section_table

    manifest, stores = _committed()
    text = (ROOT / "docs" / "results.md").read_text()
    screen = text[:text.index("\n## ")]
    sections = {s.id: s for s in manifest.sections}
    for part in manifest.answer.parts:
        rows = [r for name in part.sections for r in section_table(sections[name], [x for _, x in _selected(
            sections[name], stores)]) if r.baseline_runs >= 2 and r.value_runs >= 2]
        if not rows:
            continue
        for framework in {r.value for r in rows}:
            best = max((r for r in rows if r.value == framework), key=lambda r: r.value_median)
            shown = framework.replace("[", "\\[").replace("]", "\\]")  # as a markdown table escapes it
            line = next(line for line in screen.splitlines() if line.startswith(f"| {part.label} | {shown} |"))
            assert f"| {best.fixed('execution')}, {best.fixed('precision')} |" in line
            assert f"{best.value_median:,.0f}" in line or f"{best.value_median:.4g}" in line
            assert f"| {best.verdict} |" in line and f"| {best.baseline_runs} vs {best.value_runs} |" in line
    assert "| ResNet-50 training | jax | compiled, " in screen and "images/s" in screen and "TFLOP/s" in screen


def test_the_false_claims_are_gone_and_the_capacity_table_says_what_bound_tensorflow():
    text = (ROOT / "docs" / "results.md").read_text()
    for claim in ("within about 5% of one another in every precision", "72.6 min", "1,351 s",
                  "bound by TensorFlow's per-call dispatch", "31.4 min of run time**"):
        assert claim not in text, claim
    capacity = text[text.index("## The largest ResNet-50 batch"):]
    capacity = capacity[:capacity.index("<!-- commentary:")]
    assert "| 2,674 (kernel) |" in capacity and "`limited_by: kernel`" in capacity


def test_a_capacity_answer_one_under_the_tensor_bound_is_the_kernel_s():
    from harness.present.page_answer import kernel_bound_answer
    from harness.results.record import Result

    def answer(best, first_bad, limited_by="memory"):
        return Result(metric="max_batch_size", status="ok", median=float(best),
                      checks={"limited_by": limited_by, "first_failing_batch_size": first_bad,
                              "batch_past_2_31_elements": 2675})

    assert kernel_bound_answer(answer(2674, 2675))  # recorded as memory before the rule: still the kernel's
    assert not kernel_bound_answer(answer(2091, 2120)) and kernel_bound_answer(answer(2500, 2600, "kernel"))
